import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.message.MessageView;

/** What the RocketMQ 5 Java client scenarios (Rmq5*.java) share: options, the client configuration, JSON lines. */
final class Rmq5 {
    static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();

    private Rmq5() {
    }

    static ClientConfiguration config(String endpoint) {
        return ClientConfiguration.newBuilder()
            .setEndpoints(endpoint)
            .enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(5))
            .build();
    }

    /** The value after {@code --name} in {@code args}, else {@code fallback}. */
    static String option(String[] args, String name, String fallback) {
        int at = Arrays.asList(args).indexOf("--" + name);
        return at >= 0 && at + 1 < args.length ? args[at + 1] : fallback;
    }

    static boolean flag(String[] args, String name) {
        return Arrays.asList(args).contains("--" + name);
    }

    static String body(MessageView message) {
        return StandardCharsets.UTF_8.decode(message.getBody().duplicate()).toString();
    }

    static Object[] fields(MessageView message) {
        return new Object[] {
            "id", message.getMessageId().toString(), "body", body(message), "attempt", message.getDeliveryAttempt(),
            "tag", message.getTag().orElse(""), "group_key", message.getMessageGroup().orElse(""),
            "topic", message.getTopic(), "at", System.currentTimeMillis() / 1000.0
        };
    }

    /** One JSON line: {"event": EVENT, key: value, ...}; values are numbers, booleans or strings. */
    static synchronized void emit(String event, Object... pairs) {
        List<Object> all = new ArrayList<>(Arrays.asList("event", event));
        all.addAll(Arrays.asList(pairs));
        StringBuilder line = new StringBuilder("{");
        for (int i = 0; i + 1 < all.size(); i += 2) {
            line.append(i == 0 ? "" : ", ").append(quote(String.valueOf(all.get(i)))).append(": ");
            Object value = all.get(i + 1);
            line.append(value instanceof Number || value instanceof Boolean ? value : quote(String.valueOf(value)));
        }
        System.out.println(line.append("}"));
        System.out.flush();
    }

    private static String quote(String text) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }
}
