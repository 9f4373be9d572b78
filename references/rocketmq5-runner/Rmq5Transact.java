import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

/** {@code Rmq5Transact ENDPOINT TOPIC}: three half messages, one committed, one rolled back, one left for the
 * broker's check (its checker commits it); then runs until a line on stdin. */
public final class Rmq5Transact {
    public static void main(String[] args) throws Exception {
        String topic = args[1];
        CountDownLatch checked = new CountDownLatch(1);
        try (Producer producer = Rmq5.PROVIDER.newProducerBuilder()
            .setClientConfiguration(Rmq5.config(args[0])).setTopics(topic)
            .setTransactionChecker(message -> {
                Rmq5.emit("checked", "id", message.getMessageId().toString(), "body", Rmq5.body(message));
                checked.countDown();
                return TransactionResolution.COMMIT;
            }).build()) {
            for (String body : new String[] {"commit", "rollback", "orphan"}) {
                Transaction transaction = producer.beginTransaction();
                Message message = Rmq5.PROVIDER.newMessageBuilder().setTopic(topic)
                    .setBody(body.getBytes(StandardCharsets.UTF_8)).build();
                SendReceipt receipt = producer.send(message, transaction);
                Rmq5.emit("sent", "id", receipt.getMessageId().toString(), "body", body);
                if (body.equals("commit")) {
                    transaction.commit();
                } else if (body.equals("rollback")) {
                    transaction.rollback();
                }
            }
            checked.await(60, TimeUnit.SECONDS);
            Rmq5.emit("waiting");
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
        }
        Rmq5.emit("done");
        System.exit(0);
    }
}
