import java.time.Duration;
import java.util.Collections;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;

/** {@code Rmq5Receive ENDPOINT TOPIC GROUP COUNT [--invisible S] [--no-ack] [--change-to S] [--timeout S]}:
 * a SimpleConsumer receiving until COUNT messages arrived, acking each (or changing its invisible time). */
public final class Rmq5Receive {
    public static void main(String[] args) throws Exception {
        int count = Integer.parseInt(args[3]);
        Duration invisible = Duration.ofSeconds(Long.parseLong(Rmq5.option(args, "invisible", "20")));
        long changeTo = Long.parseLong(Rmq5.option(args, "change-to", "0"));
        long deadline = System.nanoTime() + Long.parseLong(Rmq5.option(args, "timeout", "30")) * 1_000_000_000L;
        int got = 0;
        try (SimpleConsumer consumer = Rmq5.PROVIDER.newSimpleConsumerBuilder()
            .setClientConfiguration(Rmq5.config(args[0])).setConsumerGroup(args[2])
            .setSubscriptionExpressions(Collections.singletonMap(args[1], FilterExpression.SUB_ALL))
            .setAwaitDuration(Duration.ofSeconds(2)).build()) {
            while (got < count && System.nanoTime() < deadline) {
                for (MessageView message : consumer.receive(16, invisible)) {
                    got++;
                    Rmq5.emit("received", Rmq5.fields(message));
                    if (changeTo > 0) {
                        consumer.changeInvisibleDuration(message, Duration.ofSeconds(changeTo));
                        Rmq5.emit("changed", "id", message.getMessageId().toString());
                    } else if (!Rmq5.flag(args, "no-ack")) {
                        consumer.ack(message);
                        Rmq5.emit("acked", "id", message.getMessageId().toString());
                    }
                }
            }
        }
        Rmq5.emit("done", "count", got);
        System.exit(0);
    }
}
