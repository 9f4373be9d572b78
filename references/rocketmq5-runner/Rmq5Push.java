import java.util.Collections;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;

/** {@code Rmq5Push ENDPOINT TOPIC GROUP COUNT [--fail-first K] [--timeout S]}: a PushConsumer until COUNT messages
 * were consumed successfully; each message fails its first K deliveries. */
public final class Rmq5Push {
    public static void main(String[] args) throws Exception {
        int count = Integer.parseInt(args[3]);
        int failFirst = Integer.parseInt(Rmq5.option(args, "fail-first", "0"));
        long deadline = System.nanoTime() + Long.parseLong(Rmq5.option(args, "timeout", "30")) * 1_000_000_000L;
        Map<String, Integer> seen = new ConcurrentHashMap<>();
        AtomicInteger ok = new AtomicInteger();
        try (PushConsumer consumer = Rmq5.PROVIDER.newPushConsumerBuilder()
            .setClientConfiguration(Rmq5.config(args[0])).setConsumerGroup(args[2])
            .setSubscriptionExpressions(Collections.singletonMap(args[1], FilterExpression.SUB_ALL))
            .setMessageListener(message -> {
                int n = seen.merge(message.getMessageId().toString(), 1, Integer::sum);
                boolean fail = n <= failFirst;
                Object[] fields = Rmq5.fields(message);
                Object[] all = java.util.Arrays.copyOf(fields, fields.length + 2);
                all[fields.length] = "failed";
                all[fields.length + 1] = fail;
                Rmq5.emit("received", all);
                if (fail) {
                    return ConsumeResult.FAILURE;
                }
                ok.incrementAndGet();
                return ConsumeResult.SUCCESS;
            }).build()) {
            while (ok.get() < count && System.nanoTime() < deadline) {
                Thread.sleep(50);
            }
        }
        Rmq5.emit("done", "count", ok.get());
        System.exit(0);
    }
}
