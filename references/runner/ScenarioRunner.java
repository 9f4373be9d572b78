import com.alibaba.fastjson.JSON;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.impl.FindBrokerResult;
import org.apache.rocketmq.client.impl.MQClientManager;
import org.apache.rocketmq.client.impl.consumer.PullResultExt;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.RequestCode;
import org.apache.rocketmq.common.protocol.body.ClusterInfo;
import org.apache.rocketmq.common.protocol.header.QueryConsumerOffsetRequestHeader;
import org.apache.rocketmq.common.protocol.header.SendMessageRequestHeader;
import org.apache.rocketmq.common.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.CommandCustomHeader;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Scripted scenarios through the official RocketMQ 4.x Java client, one JSON line per observation on stdout.
 *
 * <p>Usage: {@code ScenarioRunner NAMESRV PREFIX SCENARIO...}. The lines hold only what must be the same on any
 * broker that speaks RocketMQ's protocol (statuses, codes, offsets, bodies, properties), so the output of a run
 * against one broker can be compared with a run against another. Each scenario ends with a {@code done} or an
 * {@code error} line. With {@code -Drunner.accessKey=AK -Drunner.secretKey=SK} every client signs its requests
 * (ACL); the {@code acl} scenario then also tries the accounts {@code readonly} and {@code stranger}.
 */
public final class ScenarioRunner {
    private static final long DEADLINE_MS = 40_000;
    private static final AtomicInteger INSTANCES = new AtomicInteger();
    private static final TreeSet<String> VOLATILE_PROPERTIES =
        new TreeSet<>(List.of("UNIQ_KEY", "MSG_REGION", "TRACE_ON", "ORIGIN_MESSAGE_ID", "TRAN_PREPARED_QUEUE_OFFSET"));

    private final String namesrv;
    private final String prefix;
    private final DefaultMQAdminExt admin;
    private final RPCHook signer = hook(System.getProperty("runner.accessKey"), System.getProperty("runner.secretKey"));
    private String scenario = "";

    private ScenarioRunner(String namesrv, String prefix) throws MQClientException {
        this.namesrv = namesrv;
        this.prefix = prefix;
        this.admin = new DefaultMQAdminExt(signer);
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName(instance());
        admin.start();
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: ScenarioRunner NAMESRV PREFIX SCENARIO...");
            System.exit(2);
        }
        ScenarioRunner runner = new ScenarioRunner(args[0], args[1]);
        try {
            for (int i = 2; i < args.length; i++) {
                runner.run(args[i]);
            }
        } finally {
            runner.admin.shutdown();
        }
        System.exit(0);
    }

    private void run(String name) {
        scenario = name;
        try {
            switch (name) {
                case "tags": tags(); break;
                case "sql92": sql92(); break;
                case "orderly": orderly(); break;
                case "delayed": delayed(); break;
                case "retry_dlq": retryDlq(); break;
                case "transaction": transaction(); break;
                case "offsets": offsets(); break;
                case "query": query(); break;
                case "batch": batch(); break;
                case "acl": acl(); break;
                case "slave_fill": slaveFill(); break;
                case "slave_read": slaveRead(); break;
                default: throw new IllegalArgumentException("no scenario " + name);
            }
            emit("done");
        } catch (Throwable e) {
            e.printStackTrace();
            emit("error", "error", e.toString(), "cause", String.valueOf(e.getCause()));
        }
    }

    // -- scenarios ----------------------------------------------------------------------------------------

    /** Sends with tags to one queue, then pulls with a tag expression, past the end and far past it. */
    private void tags() throws Exception {
        String topic = topic("tags", 4);
        try (Clients c = new Clients("tags")) {
            MessageQueue mq = new MessageQueue(topic, brokerName(), 1);
            String[] tags = {"A", "B", "C", "A", "B", "C"};
            for (int i = 0; i < tags.length; i++) {
                Message msg = new Message(topic, tags[i], "k" + i, ("tags-" + i).getBytes(StandardCharsets.UTF_8));
                msg.putUserProperty("color", i % 2 == 0 ? "red" : "blue");
                sent(c.producer.send(msg, mq));
            }
            pulled("A || C", c.consumer.pull(mq, "A || C", 0, 32));
            pulled("*", c.consumer.pull(mq, "*", 2, 2));
            pulled("at end", c.consumer.pull(mq, "*", 6, 32));
            pulled("past end", c.consumer.pull(mq, "*", 100, 32));
            emit("offsets", "min", c.consumer.minOffset(mq), "max", c.consumer.maxOffset(mq));
        }
    }

    /** Batch sends: one request, consecutive offsets. */
    private void batch() throws Exception {
        String topic = topic("batch", 2);
        try (Clients c = new Clients("batch")) {
            MessageQueue mq = new MessageQueue(topic, brokerName(), 0);
            List<Message> msgs = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                msgs.add(new Message(topic, "T", ("batch-" + i).getBytes(StandardCharsets.UTF_8)));
            }
            sent(c.producer.send(msgs, mq));
            sent(c.producer.send(msgs, mq));
            pulled("*", c.consumer.pull(mq, "*", 0, 32));
        }
    }

    /** SQL92 property filters on pull, and a filter that does not parse. */
    private void sql92() throws Exception {
        String topic = topic("sql", 1);
        try (Clients c = new Clients("sql")) {
            MessageQueue mq = new MessageQueue(topic, brokerName(), 0);
            // The client refuses SQL92 until a heartbeat has told it the broker's version.
            MQClientInstance factory = MQClientManager.getInstance().getOrCreateMQClientInstance(c.consumer);
            factory.updateTopicRouteInfoFromNameServer(topic);
            factory.sendHeartbeatToAllBrokerWithLock();
            for (int i = 0; i < 10; i++) {
                Message msg = new Message(topic, i % 2 == 0 ? "even" : "odd", ("sql-" + i).getBytes(StandardCharsets.UTF_8));
                msg.putUserProperty("a", Integer.toString(i));
                msg.putUserProperty("s", i < 5 ? "low" : "high");
                sent(c.producer.send(msg, mq));
            }
            for (String expr : new String[] {"a BETWEEN 3 AND 6", "s = 'high' AND TAGS = 'odd'", "b IS NULL", "a > 100"}) {
                pulled(expr, c.consumer.pull(mq, MessageSelector.bySql(expr), 0, 32));
            }
            try {
                pulled("a >", c.consumer.pull(mq, MessageSelector.bySql("a >"), 0, 32));
            } catch (MQBrokerException | MQClientException e) {
                failed("a >", e);
            }
        }
    }

    /** Orders sent by key to queues, consumed by an orderly push consumer: each order's steps in sequence. */
    private void orderly() throws Exception {
        String topic = topic("orderly", 4);
        DefaultMQProducer producer = producer("orderly");
        int orders = 3;
        int steps = 5;
        Map<String, List<String>> seen = new ConcurrentHashMap<>();
        AtomicInteger count = new AtomicInteger();
        DefaultMQPushConsumer consumer = pushConsumer("orderly");
        try (Closing closing = closing(producer::shutdown, consumer::shutdown)) {
            for (int step = 0; step < steps; step++) {
                for (int order = 0; order < orders; order++) {
                    Message msg = new Message(topic, "O", ("order-" + order + "-step-" + step).getBytes(StandardCharsets.UTF_8));
                    SendResult result = producer.send(msg, (mqs, m, arg) -> mqs.get((Integer) arg % mqs.size()), order);
                    emit("sent", "status", result.getSendStatus().name(), "queue", result.getMessageQueue().getQueueId(),
                        "offset", result.getQueueOffset());
                }
            }
            consumer.subscribe(topic, "*");
            consumer.registerMessageListener((MessageListenerOrderly) (msgs, context) -> {
                for (MessageExt msg : msgs) {
                    String body = body(msg);
                    String order = body.substring(0, body.indexOf("-step"));
                    seen.computeIfAbsent(order, k -> new CopyOnWriteArrayList<>()).add(body + "@q" + msg.getQueueId());
                    count.incrementAndGet();
                }
                return ConsumeOrderlyStatus.SUCCESS;
            });
            consumer.start();
            waitFor("all ordered messages", () -> count.get() >= orders * steps);
            emit("consumed", "orders", new TreeMap<>(seen), "count", count.get());
        }
    }

    /** A message at delay level 1 arrives in its topic, with the properties the schedule leaves on it. */
    private void delayed() throws Exception {
        String topic = topic("delayed", 1);
        try (Clients c = new Clients("delayed")) {
            MessageQueue mq = new MessageQueue(topic, brokerName(), 0);
            Message msg = new Message(topic, "D", "dk", "delayed-0".getBytes(StandardCharsets.UTF_8));
            msg.setDelayTimeLevel(1);
            SendResult result = c.producer.send(msg);
            emit("sent", "status", result.getSendStatus().name(), "queue", result.getMessageQueue().getQueueId());
            PullResult[] last = new PullResult[1];
            waitFor("the delayed message", () -> {
                last[0] = pullQuietly(c.consumer, mq, "*", 0);
                return last[0] != null && last[0].getMsgFoundList() != null && !last[0].getMsgFoundList().isEmpty();
            });
            pulled("*", last[0]);
        }
    }

    /** A push consumer fails each message: one retry at level 1, then the dead letter queue. */
    private void retryDlq() throws Exception {
        String topic = topic("retry", 1);
        String group = prefix + "_retry_cg";
        DefaultMQProducer producer = producer("retry");
        List<String> deliveries = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer consumer = pushConsumer("retry");
        try (Closing closing = closing(producer::shutdown, consumer::shutdown)) {
            consumer.setMaxReconsumeTimes(1);
            consumer.subscribe(topic, "*");
            consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
                for (MessageExt msg : msgs) {
                    deliveries.add(body(msg) + " reconsume=" + msg.getReconsumeTimes() + " retryTopic="
                        + msg.getProperty("RETRY_TOPIC"));
                }
                context.setDelayLevelWhenNextConsume(1);
                return ConsumeConcurrentlyStatus.RECONSUME_LATER;
            });
            consumer.start();
            for (int i = 0; i < 2; i++) {
                sent(producer.send(new Message(topic, "R", "rk" + i, ("retry-" + i).getBytes(StandardCharsets.UTF_8))));
            }
            String dlq = "%DLQ%" + group;
            waitFor("two messages in " + dlq, () -> maxOffsetQuietly(dlq) >= 2);
            List<String> sorted = new ArrayList<>(deliveries);
            Collections.sort(sorted);
            emit("deliveries", "list", sorted);
            emit("dlq", "max", maxOffsetQuietly(dlq), "route", queueCounts(dlq));
            DefaultMQPullConsumer reader = pullConsumer("dlqreader");
            try {
                pulled("dlq", reader.pull(new MessageQueue(dlq, brokerName(), 0), "*", 0, 32), true);
            } catch (MQBrokerException | MQClientException e) {
                failed("dlq", e);
            } finally {
                reader.shutdown();
            }
        }
    }

    /** Half messages committed, rolled back, and left unknown until the broker checks back. */
    private void transaction() throws Exception {
        String topic = topic("tx", 1);
        TransactionMQProducer producer = new TransactionMQProducer(prefix + "_tx_pg", signer);
        configure(producer);
        List<String> checked = new CopyOnWriteArrayList<>();
        producer.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return LocalTransactionState.valueOf((String) arg);
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                checked.add(body(msg));
                return body(msg).startsWith("check-commit") ? LocalTransactionState.COMMIT_MESSAGE
                    : LocalTransactionState.ROLLBACK_MESSAGE;
            }
        });
        producer.start();
        DefaultMQPullConsumer consumer = pullConsumer("tx");
        try (Closing closing = closing(producer::shutdown, consumer::shutdown)) {
            String[][] cases = {
                {"commit", "COMMIT_MESSAGE"}, {"rollback", "ROLLBACK_MESSAGE"},
                {"check-commit", "UNKNOW"}, {"check-rollback", "UNKNOW"},
            };
            for (String[] c : cases) {
                Message msg = new Message(topic, "X", c[0], (c[0] + "-body").getBytes(StandardCharsets.UTF_8));
                TransactionSendResult result = producer.sendMessageInTransaction(msg, c[1]);
                emit("sent", "body", c[0], "status", result.getSendStatus().name(),
                    "local", result.getLocalTransactionState().name());
            }
            MessageQueue mq = new MessageQueue(topic, brokerName(), 0);
            waitFor("the checked-back commit", () -> maxOffsetQuietly(topic) >= 2 && checked.size() >= 2);
            PullResult result = consumer.pull(mq, "*", 0, 32);
            List<String> bodies = new ArrayList<>();
            for (MessageExt msg : result.getMsgFoundList()) {
                bodies.add(body(msg));
            }
            Collections.sort(bodies);
            TreeSet<String> checks = new TreeSet<>(checked);
            emit("visible", "status", result.getPullStatus().name(), "bodies", bodies, "checked", checks);
        }
    }

    /** Committed offsets: store, read back, unknown group, and the offset queries by time. */
    private void offsets() throws Exception {
        String topic = topic("offsets", 2);
        DefaultMQProducer producer = producer("offsets");
        DefaultMQPullConsumer consumer = pullConsumer("offsets");
        DefaultMQPullConsumer stranger = pullConsumer("stranger");
        try (Closing closing = closing(producer::shutdown, consumer::shutdown, stranger::shutdown)) {
            MessageQueue mq = new MessageQueue(topic, brokerName(), 0);
            for (int i = 0; i < 5; i++) {
                sent(producer.send(new Message(topic, "O", ("offsets-" + i).getBytes(StandardCharsets.UTF_8)), mq));
            }
            emit("unknown group", "offset", stranger.fetchConsumeOffset(mq, true));
            MessageQueue empty = new MessageQueue(topic, brokerName(), 1);
            consumer.updateConsumeOffset(mq, 3);
            consumer.updateConsumeOffset(empty, 0);
            // oneway requests, which a broker may drop (Apache's did once): sent again on every poll for their effect
            waitFor("the committed offset", () -> {
                consumer.getOffsetStore().persistAll(Set.of(mq, empty));
                return fetchQuietly(consumer, mq) == 3 && fetchQuietly(consumer, empty) == 0;
            });
            emit("committed", "offset", consumer.fetchConsumeOffset(mq, true));
            emit("bounds", "min", consumer.minOffset(mq), "max", consumer.maxOffset(mq),
                "search0", consumer.searchOffset(mq, 0), "searchFuture", consumer.searchOffset(mq, Long.MAX_VALUE / 2));
            emit("empty queue", "min", consumer.minOffset(empty), "max", consumer.maxOffset(empty),
                "search0", consumer.searchOffset(empty, 0));
            try {
                admin.resetOffsetByTimestamp(topic, prefix + "_offsets_cg", 0, true);
                emit("reset", "offset", consumer.fetchConsumeOffset(mq, true));
            } catch (MQBrokerException | MQClientException e) {
                failed("reset", e);
            }
        }
    }

    /** Messages found by key (the index) and by id (the CommitLog offset in the id). */
    private void query() throws Exception {
        String topic = topic("query", 2);
        try (Clients c = new Clients("query")) {
            List<String> offsetIds = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                Message msg = new Message(topic, "Q", "qk-shared", ("query-" + i).getBytes(StandardCharsets.UTF_8));
                SendResult result = c.producer.send(msg);
                offsetIds.add(result.getOffsetMsgId());
            }
            QueryResult[] found = new QueryResult[1];
            waitFor("three messages by key", () -> {
                try {
                    found[0] = c.consumer.queryMessage(topic, "qk-shared", 32, 0, Long.MAX_VALUE);
                    return found[0].getMessageList().size() >= 3;
                } catch (Exception e) {
                    return false;
                }
            });
            List<String> bodies = new ArrayList<>();
            for (MessageExt msg : found[0].getMessageList()) {
                bodies.add(body(msg));
            }
            Collections.sort(bodies);
            emit("by key", "bodies", bodies);
            try {
                emit("by unknown key", "count",
                    c.consumer.queryMessage(topic, "qk-nobody", 32, 0, Long.MAX_VALUE).getMessageList().size());
            } catch (MQClientException e) {
                failed("by unknown key", e);
            }
            MessageExt byId = c.consumer.viewMessage(offsetIds.get(1));
            emit("by id", "body", body(byId), "properties", properties(byId), "queueOffset", byId.getQueueOffset());
            String bogus = offsetIds.get(0).substring(0, 16) + "00000000FFFFFF00";
            try {
                emit("by bogus id", "body", body(c.consumer.viewMessage(bogus)));
            } catch (MQBrokerException | MQClientException e) {
                failed("by bogus id", e);
            }
        }
    }

    /** Sends and pulls as the signing account, a read-only one, a wrong secret and an unknown key. */
    private void acl() throws Exception {
        String topic = topic("acl", 1);
        String denied = topic("aclDenied", 1);
        MessageQueue mq = new MessageQueue(topic, brokerName(), 0);
        DefaultMQProducer producer = producer("acl");
        try {
            sent(producer.send(new Message(topic, "A", "acl-0".getBytes(StandardCharsets.UTF_8)), mq));
            sent(producer.send(new Message(denied, "A", "acl-1".getBytes(StandardCharsets.UTF_8))));
        } finally {
            producer.shutdown();
        }
        String[][] accounts = {{"readonly", "12345678"}, {"readonly", "wrong-secret"}, {"stranger", "12345678"}};
        for (String[] account : accounts) {
            String who = account[0] + "/" + (account[1].equals("12345678") ? "right" : "wrong");
            DefaultMQProducer p = producer("acl_" + account[0], hook(account[0], account[1]));
            DefaultMQPullConsumer c = pullConsumer("acl_" + account[0], hook(account[0], account[1]));
            try {
                try {
                    p.setRetryTimesWhenSendFailed(0);
                    sent(p.send(new Message(topic, "A", "acl-x".getBytes(StandardCharsets.UTF_8)), mq));
                } catch (MQBrokerException | MQClientException e) {
                    failed(who + " send", e);
                }
                for (String t : new String[] {topic, denied}) {
                    try {
                        pulled(who + " pull " + t.substring(prefix.length()), c.pull(new MessageQueue(t, brokerName(), 0), "*", 0, 32));
                    } catch (MQBrokerException | MQClientException e) {
                        failed(who + " pull " + t.substring(prefix.length()), e);
                    }
                }
            } finally {
                p.shutdown();
                c.shutdown();
            }
        }
    }

    private static final int SLAVE_MESSAGES = 40;
    private static final String[] SLAVE_TAGS = {"A", "B", "C"};

    /**
     * Before the master dies: {@value #SLAVE_MESSAGES} sends acknowledged by a SYNC_MASTER (so on the slave too),
     * an offset committed to the master, then until the slave has the topic, every message and that offset
     * (its table sync).
     */
    private void slaveFill() throws Exception {
        String topic = topic("slave", 2);
        try (Clients c = new Clients("slave")) {
            emit("brokers", "ids", new TreeSet<>(broker().getBrokerAddrs().keySet()));
            // SLAVE_NOT_AVAILABLE until the slave has linked to the master's HA port (it learns it at registration)
            String probe = topic("slaveProbe", 1);
            waitFor("a send the slave acknowledged", () -> {
                try {
                    return c.producer.send(new Message(probe, "P", new byte[] {1})).getSendStatus() == SendStatus.SEND_OK;
                } catch (Exception e) {
                    return false;
                }
            });
            for (int i = 0; i < SLAVE_MESSAGES; i++) {
                String tag = SLAVE_TAGS[i % SLAVE_TAGS.length];
                Message msg = new Message(topic, tag, "sk" + i, ("slave-" + i).getBytes(StandardCharsets.UTF_8));
                sent(c.producer.send(msg, new MessageQueue(topic, brokerName(), i % 2)));
            }
            MessageQueue mq = new MessageQueue(topic, brokerName(), 0);
            c.consumer.getOffsetStore().updateConsumeOffsetToBroker(mq, 5, false);
            String slave = broker().getBrokerAddrs().get(1L);
            MQClientInstance factory = MQClientManager.getInstance().getOrCreateMQClientInstance(c.consumer);
            waitFor("the slave's copy of the topic and the offset", () -> {
                try {
                    long stored = 0;
                    for (var entry : factory.getMQClientAPIImpl().getTopicStatsInfo(slave, topic, 3000)
                        .getOffsetTable().values()) {
                        stored += entry.getMaxOffset();
                    }
                    RemotingCommand offset = ask(factory, slave, RequestCode.QUERY_CONSUMER_OFFSET, queryOffset(mq, "slave"));
                    return stored == SLAVE_MESSAGES && "5".equals(offset.getExtFields().get("offset"));
                } catch (Exception e) {
                    return false;
                }
            });
            emit("slave has", "messages", SLAVE_MESSAGES, "offset", 5);
        }
    }

    /**
     * After the master was killed: the route, pulls served by the slave, offsets read from and committed to it,
     * and what a send gets (the client's exception, and the slave's own answer to a send).
     */
    private void slaveRead() throws Exception {
        String topic = prefix + "_slave";
        waitFor("the route without the master", () -> {
            try {
                return !admin.examineTopicRouteInfo(topic).getBrokerDatas().get(0).getBrokerAddrs().containsKey(0L);
            } catch (Exception e) {
                return false;
            }
        });
        emit("route", "ids", new TreeSet<>(broker().getBrokerAddrs().keySet()), "queues", queueCounts(topic));
        String slave = broker().getBrokerAddrs().get(1L);
        try (Clients c = new Clients("slave")) {
            MQClientInstance factory = MQClientManager.getInstance().getOrCreateMQClientInstance(c.consumer);
            MessageQueue mq = new MessageQueue(topic, brokerName(), 0);
            MessageQueue other = new MessageQueue(topic, brokerName(), 1);
            slavePulled("*", c.consumer.pull(mq, "*", 0, 32));
            FindBrokerResult readFrom = factory.findBrokerAddressInSubscribe(brokerName(), 0L, false);
            emit("read from", "slave", readFrom.isSlave(), "address is the slave's", slave.equals(readFrom.getBrokerAddr()));
            slavePulled("A || C", c.consumer.pull(other, "A || C", 0, 32));
            slavePulled("from 15", c.consumer.pull(mq, "*", 15, 32));
            slavePulled("at end", c.consumer.pull(mq, "*", 20, 32));
            slavePulled("past end", c.consumer.pull(mq, "*", 100, 32));
            try {
                emit("max offset", "offset", c.consumer.maxOffset(mq));
            } catch (MQClientException e) {
                failed("max offset", e);
            }
            emit("synced offset", "offset", c.consumer.fetchConsumeOffset(mq, true));
            emit("unknown queue offset", "offset", c.consumer.fetchConsumeOffset(other, true));
            for (MessageQueue q : new MessageQueue[] {mq, other}) {
                try {
                    c.consumer.getOffsetStore().updateConsumeOffsetToBroker(q, 12, false);
                    emit("committed", "queue", q.getQueueId(), "offset", c.consumer.fetchConsumeOffset(q, true));
                } catch (MQBrokerException | MQClientException e) {
                    failed("commit " + q.getQueueId(), e);
                }
            }
            RemotingCommand offset = ask(factory, slave, RequestCode.QUERY_CONSUMER_OFFSET, queryOffset(mq, "slave"));
            emit("slave answers", "what", "query offset", "code", offset.getCode(), "offset",
                offset.getExtFields() == null ? null : offset.getExtFields().get("offset"));
            offset = ask(factory, slave, RequestCode.QUERY_CONSUMER_OFFSET, queryOffset(mq, "nobody"));
            emit("slave answers", "what", "query unknown group", "code", offset.getCode(), "remark", offset.getRemark());
            Message msg = new Message(topic, "A", "after", "after-death".getBytes(StandardCharsets.UTF_8));
            c.producer.setRetryTimesWhenSendFailed(0);
            try {
                sent(c.producer.send(msg));
            } catch (MQBrokerException | MQClientException e) {
                failed("send", e);
            }
            try {
                sent(c.producer.send(msg, mq));
            } catch (MQBrokerException | MQClientException e) {
                failed("send to a queue", e);
            }
            SendMessageRequestHeader send = new SendMessageRequestHeader();
            send.setProducerGroup(prefix + "_slave_pg");
            send.setTopic(topic);
            send.setDefaultTopic("TBW102");
            send.setDefaultTopicQueueNums(4);
            send.setQueueId(0);
            send.setSysFlag(0);
            send.setBornTimestamp(System.currentTimeMillis());
            send.setFlag(0);
            send.setProperties("");
            send.setReconsumeTimes(0);
            RemotingCommand request = RemotingCommand.createRequestCommand(RequestCode.SEND_MESSAGE, send);
            request.setBody("to-the-slave".getBytes(StandardCharsets.UTF_8));
            RemotingCommand answer = factory.getMQClientAPIImpl().getRemotingClient().invokeSync(slave, request, 3000);
            emit("slave answers", "what", "send", "code", answer.getCode(), "remark", answer.getRemark());
        }
    }

    private QueryConsumerOffsetRequestHeader queryOffset(MessageQueue mq, String group) {
        QueryConsumerOffsetRequestHeader header = new QueryConsumerOffsetRequestHeader();
        header.setConsumerGroup(prefix + "_" + group + "_cg");
        header.setTopic(mq.getTopic());
        header.setQueueId(mq.getQueueId());
        return header;
    }

    private static RemotingCommand ask(MQClientInstance factory, String addr, int code, CommandCustomHeader header)
        throws Exception {
        return factory.getMQClientAPIImpl().getRemotingClient()
            .invokeSync(addr, RemotingCommand.createRequestCommand(code, header), 3000);
    }

    /** A pull's outcome and the broker its answer suggests reading from next. */
    private void slavePulled(String expr, PullResult result) {
        pulled(expr, result);
        emit("suggested", "expr", expr, "brokerId", ((PullResultExt) result).getSuggestWhichBrokerId());
    }

    // -- clients and topics -------------------------------------------------------------------------------

    /** What a try-with-resources shuts down at its end. */
    private interface Closing extends AutoCloseable {
        @Override
        void close();
    }

    private static Closing closing(Runnable... shutdowns) {
        return () -> {
            for (Runnable shutdown : shutdowns) {
                shutdown.run();
            }
        };
    }

    /** A producer and a pull consumer of one scenario, shut down together. */
    private final class Clients implements AutoCloseable {
        final DefaultMQProducer producer;
        final DefaultMQPullConsumer consumer;

        Clients(String name) throws MQClientException {
            producer = producer(name);
            consumer = pullConsumer(name);
        }

        @Override
        public void close() {
            producer.shutdown();
            consumer.shutdown();
        }
    }

    private String topic(String name, int queues) throws Exception {
        String topic = prefix + "_" + name;
        TopicConfig config = new TopicConfig(topic, queues, queues, 6);
        admin.createAndUpdateTopicConfig(brokerAddr(), config);
        waitFor("a route to " + topic, () -> queueCounts(topic).size() > 0);
        emit("topic", "route", queueCounts(topic));
        return topic;
    }

    private List<Integer> queueCounts(String topic) {
        try {
            List<Integer> counts = new ArrayList<>();
            admin.examineTopicRouteInfo(topic).getQueueDatas().forEach(q -> {
                counts.add(q.getReadQueueNums());
                counts.add(q.getWriteQueueNums());
                counts.add(q.getPerm());
            });
            return counts;
        } catch (Exception e) {
            return List.of();
        }
    }

    private long maxOffsetQuietly(String topic) {
        try {
            long total = 0;
            for (var entry : admin.examineTopicStats(topic).getOffsetTable().values()) {
                total += entry.getMaxOffset();
            }
            return total;
        } catch (Exception e) {
            return -1;
        }
    }

    private BrokerData broker() throws Exception {
        ClusterInfo info = admin.examineBrokerClusterInfo();
        return info.getBrokerAddrTable().values().iterator().next();
    }

    private String brokerName() throws Exception {
        return broker().getBrokerName();
    }

    private String brokerAddr() throws Exception {
        return broker().selectBrokerAddr();
    }

    private static String instance() {
        return "runner-" + ProcessHandle.current().pid() + "-" + INSTANCES.incrementAndGet();
    }

    private void configure(org.apache.rocketmq.client.ClientConfig client) {
        client.setNamesrvAddr(namesrv);
        client.setInstanceName(instance());
    }

    private static RPCHook hook(String accessKey, String secretKey) {
        return accessKey == null ? null : new AclClientRPCHook(new SessionCredentials(accessKey, secretKey));
    }

    private DefaultMQProducer producer(String name) throws MQClientException {
        return producer(name, signer);
    }

    private DefaultMQProducer producer(String name, RPCHook hook) throws MQClientException {
        DefaultMQProducer producer = new DefaultMQProducer(prefix + "_" + name + "_pg", hook);
        configure(producer);
        producer.setSendMsgTimeout(10_000);
        producer.start();
        return producer;
    }

    private DefaultMQPullConsumer pullConsumer(String name) throws MQClientException {
        return pullConsumer(name, signer);
    }

    private DefaultMQPullConsumer pullConsumer(String name, RPCHook hook) throws MQClientException {
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer(prefix + "_" + name + "_cg", hook);
        configure(consumer);
        consumer.start();
        return consumer;
    }

    private DefaultMQPushConsumer pushConsumer(String name) {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(prefix + "_" + name + "_cg", signer,
            new org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely());
        configure(consumer);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        return consumer;
    }

    private static PullResult pullQuietly(DefaultMQPullConsumer consumer, MessageQueue mq, String expr, long offset) {
        try {
            return consumer.pull(mq, expr, offset, 32);
        } catch (Exception e) {
            return null;
        }
    }

    private static long fetchQuietly(DefaultMQPullConsumer consumer, MessageQueue mq) {
        try {
            return consumer.fetchConsumeOffset(mq, true);
        } catch (Exception e) {
            return Long.MIN_VALUE;
        }
    }

    private static void waitFor(String what, BooleanSupplier condition) throws InterruptedException {
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        while (!condition.getAsBoolean()) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("timed out waiting for " + what);
            }
            Thread.sleep(50);
        }
    }

    // -- output -------------------------------------------------------------------------------------------

    private static String body(MessageExt msg) {
        return new String(msg.getBody(), StandardCharsets.UTF_8);
    }

    private static Map<String, String> properties(MessageExt msg) {
        Map<String, String> kept = new TreeMap<>(msg.getProperties());
        kept.keySet().removeAll(VOLATILE_PROPERTIES);
        return kept;
    }

    private void sent(SendResult result) {
        emit("sent", "status", result.getSendStatus().name(), "queue", result.getMessageQueue().getQueueId(),
            "offset", result.getQueueOffset(), "hasMsgId", result.getMsgId() != null,
            "hasOffsetMsgId", result.getOffsetMsgId() != null);
    }

    private void pulled(String expr, PullResult result) {
        pulled(expr, result, false);
    }

    /** A pull's outcome; {@code unordered} for a queue concurrent consumers filled: sorted, no queue offsets. */
    private void pulled(String expr, PullResult result, boolean unordered) {
        List<Map<String, Object>> msgs = new ArrayList<>();
        if (result.getMsgFoundList() != null) {
            for (MessageExt msg : result.getMsgFoundList()) {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("body", body(msg));
                m.put("topic", msg.getTopic());
                m.put("tags", msg.getTags());
                m.put("keys", msg.getKeys());
                m.put("queueId", msg.getQueueId());
                if (!unordered) {
                    m.put("queueOffset", msg.getQueueOffset());
                }
                m.put("reconsumeTimes", msg.getReconsumeTimes());
                m.put("sysFlag", msg.getSysFlag());
                m.put("flag", msg.getFlag());
                m.put("delayLevel", msg.getDelayTimeLevel());
                m.put("properties", properties(msg));
                msgs.add(m);
            }
        }
        if (unordered) {
            msgs.sort((a, b) -> ((String) a.get("body")).compareTo((String) b.get("body")));
        }
        emit("pulled", "expr", expr, "status", result.getPullStatus().name(), "next", result.getNextBeginOffset(),
            "min", result.getMinOffset(), "max", result.getMaxOffset(), "msgs", msgs);
    }

    private void failed(String what, Exception e) {
        int code = e instanceof MQBrokerException ? ((MQBrokerException) e).getResponseCode()
            : ((MQClientException) e).getResponseCode();
        emit("failed", "what", what, "class", e.getClass().getSimpleName(), "code", code, "message", e.getMessage());
    }

    private void emit(String event, Object... pairs) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("scenario", scenario);
        line.put("event", event);
        for (int i = 0; i + 1 < pairs.length; i += 2) {
            line.put((String) pairs[i], pairs[i + 1]);
        }
        synchronized (System.out) {
            System.out.println(JSON.toJSONString(line));
            System.out.flush();
        }
    }
}
