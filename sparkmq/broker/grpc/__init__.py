"""The RocketMQ 5 gRPC endpoint (``apache.rocketmq.v2.MessagingService``, proxyMode=LOCAL).

Imported only when ``enableGrpcServer=true``: grpcio, protobuf and the published protocol
stubs (PyPI ``rocketmq-python-client``'s ``rocketmq.grpc_protocol``) are the ``grpc`` extra.
See docs/grpc.md.
"""
