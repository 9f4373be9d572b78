import com.alibaba.fastjson.JSON;
import java.nio.charset.StandardCharsets;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.trace.TraceView;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.topic.TopicValidator;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The official client with message trace on: {@code TraceRunner NAMESRV TOPIC PREFIX}.
 *
 * <p>A producer built with {@code enableMsgTrace} sends one message with keys, a push consumer built with
 * {@code enableMsgTrace} consumes it; both shut down (which sends their queued trace records). One JSON line
 * holds the message id, the groups, whether it was consumed, and whether the broker's index found its Pub and
 * SubAfter records (polled through the admin client before the clients shut down).
 */
public final class TraceRunner {
    private TraceRunner() {
    }

    /** Waits (up to 30 s) until the broker's index finds the message's Pub and SubAfter records. */
    private static boolean tracesStored(String namesrv, String msgId, String prefix) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName("trace-admin-" + prefix);
        admin.start();
        try {
            long deadline = System.currentTimeMillis() + 30_000;
            while (System.currentTimeMillis() < deadline) {
                Set<String> types = new HashSet<>();
                try {
                    QueryResult found = admin.queryMessage(TopicValidator.RMQ_SYS_TRACE_TOPIC, msgId, 64, 0, Long.MAX_VALUE);
                    for (MessageExt message : found.getMessageList()) {
                        for (TraceView view : TraceView.decodeFromTraceTransData(msgId, message)) {
                            types.add(view.getMsgType());
                        }
                    }
                } catch (MQClientException notYet) {
                    // no trace message indexed under the id yet
                }
                if (types.contains("Pub") && types.contains("SubAfter")) {
                    return true;
                }
                Thread.sleep(100);
            }
            return false;
        } finally {
            admin.shutdown();
        }
    }

    public static void main(String[] args) throws Exception {
        String namesrv = args[0];
        String topic = args[1];
        String producerGroup = args[2] + "_PID_java_trace";
        String consumerGroup = args[2] + "_CID_java_trace";
        CountDownLatch consumed = new CountDownLatch(1);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(consumerGroup, true);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("trace-consumer-" + args[2]);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                if ("java-traced".equals(new String(message.getBody(), StandardCharsets.UTF_8))) {
                    consumed.countDown();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        DefaultMQProducer producer = new DefaultMQProducer(producerGroup, true);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("trace-producer-" + args[2]);
        producer.start();
        Message message = new Message(topic, "books", "java-key-1 java-key-2", "java-traced".getBytes(StandardCharsets.UTF_8));
        SendResult sent = producer.send(message);
        boolean done = consumed.await(40, TimeUnit.SECONDS);
        boolean traced = done && tracesStored(namesrv, sent.getMsgId(), args[2]);
        producer.shutdown();
        consumer.shutdown();
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("msgId", sent.getMsgId());
        line.put("producerGroup", producerGroup);
        line.put("consumerGroup", consumerGroup);
        line.put("consumed", done);
        line.put("traced", traced);
        System.out.println(JSON.toJSONString(line));
        System.exit(0);
    }
}
