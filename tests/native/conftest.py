"""The budget of the hypothesis tests here under `make native-check` (sanitized build, slower calls)."""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "native-check", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
