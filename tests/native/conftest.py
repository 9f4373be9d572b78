"""The hypothesis settings of the tests here under `make native-check` (sanitized build, slower calls):
no deadline, hypothesis's default number of examples where a test sets none."""

from hypothesis import HealthCheck, settings

settings.register_profile("native-check", deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
