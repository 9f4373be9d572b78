import com.alibaba.fastjson.JSON;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Throughput and latency of the official Java client against one cluster, one JSON line per measurement.
 *
 * <pre>
 * ClientBench NAMESRV send TOPIC THREADS SECONDS BODY_BYTES BATCH [LIMIT]   sync sends (BATCH 1: single
 *                                                  messages), until SECONDS passed or LIMIT messages were stored
 * ClientBench NAMESRV async TOPIC IN_FLIGHT SECONDS BODY_BYTES     async sends, IN_FLIGHT unanswered at a time
 * ClientBench NAMESRV pull TOPIC COUNT                              pull every queue from offset 0
 * ClientBench NAMESRV push TOPIC GROUP COUNT                        a push consumer from the first offset
 * ClientBench NAMESRV latency TOPIC COUNT BODY_BYTES                send one at a time, time until consumed
 * </pre>
 */
public final class ClientBench {
    private static final long DEADLINE_MS = 120_000;

    private ClientBench() {
    }

    public static void main(String[] args) throws Exception {
        String namesrv = args[0];
        String[] rest = Arrays.copyOfRange(args, 2, args.length);
        switch (args[1]) {
            case "send": send(namesrv, rest); break;
            case "async": sendAsync(namesrv, rest); break;
            case "pull": pull(namesrv, rest); break;
            case "push": push(namesrv, rest); break;
            case "latency": latency(namesrv, rest); break;
            default: throw new IllegalArgumentException("no mode " + args[1]);
        }
        System.exit(0);
    }

    private static void send(String namesrv, String[] a) throws Exception {
        String topic = a[0];
        int threads = Integer.parseInt(a[1]);
        long seconds = Long.parseLong(a[2]);
        byte[] body = new byte[Integer.parseInt(a[3])];
        int batch = Integer.parseInt(a[4]);
        long limit = a.length > 5 ? Long.parseLong(a[5]) : Long.MAX_VALUE;
        DefaultMQProducer producer = producer(namesrv, "bench_send_pg");
        producer.send(new Message(topic, "W", body));  // the route, the connections
        AtomicLong sent = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        List<Thread> workers = new ArrayList<>();
        long start = System.nanoTime();
        for (int t = 0; t < threads; t++) {
            Thread worker = new Thread(() -> {
                List<Message> msgs = new ArrayList<>();
                for (int i = 0; i < batch; i++) {
                    msgs.add(new Message(topic, "T", body));
                }
                while (System.nanoTime() < end && sent.get() < limit) {
                    try {
                        SendStatus status = batch == 1 ? producer.send(msgs.get(0)).getSendStatus()
                            : producer.send(msgs).getSendStatus();
                        if (status == SendStatus.SEND_OK) {
                            sent.addAndGet(batch);
                        } else {
                            failed.addAndGet(batch);
                        }
                    } catch (Exception e) {
                        failed.addAndGet(batch);
                    }
                }
            });
            worker.start();
            workers.add(worker);
        }
        for (Thread worker : workers) {
            worker.join();
        }
        double elapsed = (System.nanoTime() - start) / 1e9;
        producer.shutdown();
        emit("send", "batch", batch, "threads", threads, "sent", sent.get(), "failed", failed.get(),
            "seconds", elapsed, "msgs_per_s", sent.get() / elapsed);
    }

    private static void sendAsync(String namesrv, String[] a) throws Exception {
        String topic = a[0];
        int inFlight = Integer.parseInt(a[1]);
        long seconds = Long.parseLong(a[2]);
        byte[] body = new byte[Integer.parseInt(a[3])];
        DefaultMQProducer producer = producer(namesrv, "bench_async_pg");
        producer.send(new Message(topic, "W", body));  // the route, the connections
        Semaphore permits = new Semaphore(inFlight);
        AtomicLong sent = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        SendCallback callback = new SendCallback() {
            @Override
            public void onSuccess(SendResult result) {
                (result.getSendStatus() == SendStatus.SEND_OK ? sent : failed).incrementAndGet();
                permits.release();
            }

            @Override
            public void onException(Throwable e) {
                failed.incrementAndGet();
                permits.release();
            }
        };
        long start = System.nanoTime();
        long end = start + TimeUnit.SECONDS.toNanos(seconds);
        while (System.nanoTime() < end) {
            permits.acquire();
            try {
                producer.send(new Message(topic, "A", body), callback);
            } catch (Exception e) {
                failed.incrementAndGet();
                permits.release();
            }
        }
        permits.acquire(inFlight);  // every send answered
        double elapsed = (System.nanoTime() - start) / 1e9;
        producer.shutdown();
        emit("async", "in_flight", inFlight, "sent", sent.get(), "failed", failed.get(), "seconds", elapsed,
            "msgs_per_s", sent.get() / elapsed);
    }

    private static void pull(String namesrv, String[] a) throws Exception {
        String topic = a[0];
        long count = Long.parseLong(a[1]);
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer("bench_pull_cg");
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("bench-pull-" + ProcessHandle.current().pid());
        consumer.start();
        long got = 0;
        long start = System.nanoTime();
        for (MessageQueue mq : consumer.fetchSubscribeMessageQueues(topic)) {
            long offset = 0;
            while (true) {
                PullResult result = consumer.pull(mq, "*", offset, 32);
                if (result.getPullStatus() != PullStatus.FOUND) {
                    break;
                }
                got += result.getMsgFoundList().size();
                offset = result.getNextBeginOffset();
            }
        }
        double elapsed = (System.nanoTime() - start) / 1e9;
        consumer.shutdown();
        emit("pull", "expected", count, "got", got, "seconds", elapsed, "msgs_per_s", got / elapsed);
    }

    private static void push(String namesrv, String[] a) throws Exception {
        String topic = a[0];
        long count = Long.parseLong(a[2]);
        AtomicLong got = new AtomicLong();
        AtomicLong last = new AtomicLong();
        CountDownLatch done = new CountDownLatch(1);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(a[1]);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("bench-push-" + ProcessHandle.current().pid());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setConsumeMessageBatchMaxSize(32);
        consumer.setPullBatchSize(32);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            if (got.addAndGet(msgs.size()) >= count) {
                last.set(System.nanoTime());
                done.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        long start = System.nanoTime();
        consumer.start();
        boolean finished = done.await(DEADLINE_MS, TimeUnit.MILLISECONDS);
        double elapsed = ((finished ? last.get() : System.nanoTime()) - start) / 1e9;
        consumer.shutdown();
        emit("push", "expected", count, "got", got.get(), "finished", finished, "seconds", elapsed,
            "msgs_per_s", got.get() / elapsed);
    }

    private static void latency(String namesrv, String[] a) throws Exception {
        String topic = a[0];
        int count = Integer.parseInt(a[1]);
        byte[] padding = new byte[Integer.parseInt(a[2])];
        AtomicLongArray sentAt = new AtomicLongArray(count + 1);
        long[] latencies = new long[count + 1];
        CountDownLatch warm = new CountDownLatch(1);
        CountDownLatch done = new CountDownLatch(count);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer("bench_latency_cg");
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("bench-latency-" + ProcessHandle.current().pid());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            long now = System.nanoTime();
            for (MessageExt msg : msgs) {
                int index = Integer.parseInt(msg.getKeys());
                if (index == 0) {
                    warm.countDown();
                } else if (latencies[index] == 0) {
                    latencies[index] = now - sentAt.get(index);
                    done.countDown();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        DefaultMQProducer producer = producer(namesrv, "bench_latency_pg");
        long warmDeadline = System.currentTimeMillis() + DEADLINE_MS;
        while (!warm.await(500, TimeUnit.MILLISECONDS)) {  // until the consumer owns the queues and sees a send
            producer.send(new Message(topic, "L", "0", padding));
            if (System.currentTimeMillis() > warmDeadline) {
                throw new IllegalStateException("the latency consumer never received a message");
            }
        }
        for (int i = 1; i <= count; i++) {
            sentAt.set(i, System.nanoTime());
            producer.send(new Message(topic, "L", Integer.toString(i), padding));
        }
        boolean finished = done.await(DEADLINE_MS, TimeUnit.MILLISECONDS);
        producer.shutdown();
        consumer.shutdown();
        long[] measured = Arrays.stream(latencies, 1, count + 1).filter(v -> v > 0).sorted().toArray();
        emit("latency", "count", measured.length, "finished", finished,
            "p50_ms", percentile(measured, 0.50), "p99_ms", percentile(measured, 0.99),
            "max_ms", measured.length == 0 ? 0 : measured[measured.length - 1] / 1e6);
    }

    private static double percentile(long[] sorted, double q) {
        if (sorted.length == 0) {
            return 0;
        }
        return sorted[Math.min(sorted.length - 1, (int) Math.ceil(q * sorted.length) - 1)] / 1e6;
    }

    private static DefaultMQProducer producer(String namesrv, String group) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(group);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("bench-" + group + "-" + ProcessHandle.current().pid());
        producer.setSendMsgTimeout(10_000);
        producer.start();
        return producer;
    }

    private static void emit(String event, Object... pairs) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("event", event);
        for (int i = 0; i + 1 < pairs.length; i += 2) {
            line.put((String) pairs[i], pairs[i + 1]);
        }
        System.out.println(JSON.toJSONString(line));
        System.out.flush();
    }
}
