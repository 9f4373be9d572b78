"""The Settings a client is answered with on its Telemetry stream (the proxy's ``GrpcClientSettingsManager``)."""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb

from sparkmq.broker.subscriptions import SubscriptionGroupConfig

PRODUCER_MAX_ATTEMPTS = 3
RECEIVE_BATCH_SIZE = 32
LONG_POLLING_TIMEOUT_S = 30
RETRY_DELAYS_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)


def answer(request: pb.Settings, max_body_size: int, group: SubscriptionGroupConfig | None) -> pb.Settings:
    """``request`` completed with the server's side: body limit, backoff, the group's retry policy and FIFO flag."""
    settings = pb.Settings()
    settings.CopyFrom(request)
    settings.request_timeout.FromSeconds(3)
    if request.client_type == pb.PRODUCER:
        settings.publishing.max_body_size = max_body_size
        settings.publishing.validate_message_type = True
        settings.backoff_policy.max_attempts = PRODUCER_MAX_ATTEMPTS
        settings.backoff_policy.exponential_backoff.initial.FromMilliseconds(10)
        settings.backoff_policy.exponential_backoff.max.FromSeconds(1)
        settings.backoff_policy.exponential_backoff.multiplier = 2.0
        return settings
    if group is not None:
        settings.subscription.fifo = group.consume_message_orderly
        settings.backoff_policy.max_attempts = group.retry_max_times + 1
        delays = settings.backoff_policy.customized_backoff.next
        for seconds in RETRY_DELAYS_S[: max(1, group.retry_max_times)]:
            delays.add().FromSeconds(seconds)
    settings.subscription.receive_batch_size = RECEIVE_BATCH_SIZE
    if not request.subscription.HasField("long_polling_timeout"):
        settings.subscription.long_polling_timeout.FromSeconds(LONG_POLLING_TIMEOUT_S)
    return settings
