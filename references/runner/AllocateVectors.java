import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.client.consumer.AllocateMessageQueueStrategy;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMachineRoomNearby;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragelyByCircle;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueByConfig;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueByMachineRoom;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueConsistentHash;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * The rocketmq-client allocation strategies' answers, one JSON line per case read from stdin.
 *
 * <p>A case: {@code strategy} (AVG, AVG_BY_CIRCLE, CONFIG, MACHINE_ROOM, CONSISTENT_HASH, NEARBY_AVG), {@code queues}
 * ([topic, broker, id] each), {@code clients}, and per strategy {@code config} (queues), {@code rooms} (the consumer
 * rooms), {@code virtualNodes}, {@code brokerRooms} / {@code clientRooms} (name to room). Queues and client ids are
 * sorted first, as RebalanceImpl does; the answer maps every client id to its queues.
 */
public final class AllocateVectors {
    private AllocateVectors() {
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            if (line.isEmpty()) {
                continue;
            }
            JSONObject spec = JSON.parseObject(line);
            List<MessageQueue> queues = queues(spec.getJSONArray("queues"));
            List<String> clients = new ArrayList<>(spec.getJSONArray("clients").toJavaList(String.class));
            Collections.sort(queues);
            Collections.sort(clients);
            AllocateMessageQueueStrategy strategy = strategy(spec);
            Map<String, Object> answer = new LinkedHashMap<>();
            for (String client : clients) {
                List<List<Object>> share = new ArrayList<>();
                for (MessageQueue mq : strategy.allocate("G", client, queues, clients)) {
                    List<Object> row = new ArrayList<>();
                    row.add(mq.getTopic());
                    row.add(mq.getBrokerName());
                    row.add(mq.getQueueId());
                    share.add(row);
                }
                answer.put(client, share);
            }
            System.out.println(JSON.toJSONString(answer));
        }
        System.out.flush();
    }

    private static List<MessageQueue> queues(JSONArray rows) {
        List<MessageQueue> queues = new ArrayList<>();
        for (int i = 0; i < rows.size(); i++) {
            JSONArray row = rows.getJSONArray(i);
            queues.add(new MessageQueue(row.getString(0), row.getString(1), row.getIntValue(2)));
        }
        return queues;
    }

    private static AllocateMessageQueueStrategy strategy(JSONObject spec) {
        String name = spec.getString("strategy");
        switch (name) {
            case "AVG":
                return new AllocateMessageQueueAveragely();
            case "AVG_BY_CIRCLE":
                return new AllocateMessageQueueAveragelyByCircle();
            case "CONFIG":
                AllocateMessageQueueByConfig byConfig = new AllocateMessageQueueByConfig();
                byConfig.setMessageQueueList(queues(spec.getJSONArray("config")));
                return byConfig;
            case "MACHINE_ROOM":
                AllocateMessageQueueByMachineRoom byRoom = new AllocateMessageQueueByMachineRoom();
                byRoom.setConsumeridcs(new HashSet<>(spec.getJSONArray("rooms").toJavaList(String.class)));
                return byRoom;
            case "CONSISTENT_HASH":
                return new AllocateMessageQueueConsistentHash(spec.getIntValue("virtualNodes"));
            case "NEARBY_AVG":
                final JSONObject brokerRooms = spec.getJSONObject("brokerRooms");
                final JSONObject clientRooms = spec.getJSONObject("clientRooms");
                return new AllocateMachineRoomNearby(new AllocateMessageQueueAveragely(),
                    new AllocateMachineRoomNearby.MachineRoomResolver() {
                        @Override
                        public String brokerDeployIn(MessageQueue messageQueue) {
                            return brokerRooms.getString(messageQueue.getBrokerName());
                        }

                        @Override
                        public String consumerDeployIn(String clientID) {
                            return clientRooms.getString(clientID);
                        }
                    });
            default:
                throw new IllegalArgumentException("unknown strategy " + name);
        }
    }
}
