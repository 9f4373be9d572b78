"""Short-lived producers spread over a topic's queues, as Java's random first queue (``ThreadLocalIndex``) does."""

from __future__ import annotations

import subprocess
import sys


def test_one_cli_send_per_process_does_not_pile_into_queue_0(ops_cluster) -> None:
    topic = ops_cluster.topic(queues=4)
    command = [sys.executable, "-m", "sparkmq", "admin", "sendMessage", "-n", ops_cluster.ns, "-t", topic, "-p", "x"]
    sends = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(12)]
    queue_ids = []
    for send in sends:
        out, err = send.communicate(timeout=120)
        assert send.returncode == 0, err
        broker, qid, status, _msg_id = out.splitlines()[-1].split()
        assert (broker, status) == ("broker-a", "SEND_OK")
        queue_ids.append(int(qid))
    # Twelve producers all starting at one queue: (1/4)^11 by chance with a random start; always with a fixed one.
    assert len(set(queue_ids)) > 1, queue_ids
