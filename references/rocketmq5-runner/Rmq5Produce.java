import java.nio.charset.StandardCharsets;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;

/** {@code Rmq5Produce ENDPOINT TOPIC COUNT [--tag T] [--group-key G] [--delay-ms D]}: one "sent" line per message. */
public final class Rmq5Produce {
    public static void main(String[] args) throws Exception {
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        String tag = Rmq5.option(args, "tag", "");
        String groupKey = Rmq5.option(args, "group-key", "");
        long delayMs = Long.parseLong(Rmq5.option(args, "delay-ms", "0"));
        try (Producer producer = Rmq5.PROVIDER.newProducerBuilder()
            .setClientConfiguration(Rmq5.config(args[0])).setTopics(topic).build()) {
            for (int i = 0; i < count; i++) {
                String body = "m" + i;
                MessageBuilder builder = Rmq5.PROVIDER.newMessageBuilder().setTopic(topic)
                    .setBody(body.getBytes(StandardCharsets.UTF_8));
                if (!tag.isEmpty()) {
                    builder.setTag(tag);
                }
                if (!groupKey.isEmpty()) {
                    builder.setMessageGroup(groupKey);
                }
                if (delayMs > 0) {
                    builder.setDeliveryTimestamp(System.currentTimeMillis() + delayMs);
                }
                Message message = builder.build();
                SendReceipt receipt = producer.send(message);
                Rmq5.emit("sent", "id", receipt.getMessageId().toString(), "body", body,
                    "sent_at", System.currentTimeMillis() / 1000.0);
            }
        }
        Rmq5.emit("done");
        System.exit(0);
    }
}
