import com.alibaba.fastjson.JSON;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.tools.command.MQAdminStartup;

/**
 * RocketMQ's own mqadmin commands, several in one JVM: {@code AdminBatch NAMESRV "cmd args..." ...}.
 *
 * <p>Each command runs through {@code MQAdminStartup.main0} with {@code -n NAMESRV} appended; one JSON line per
 * command holds what it printed.
 */
public final class AdminBatch {
    private AdminBatch() {
    }

    public static void main(String[] args) {
        PrintStream out = System.out;
        PrintStream err = System.err;
        for (int i = 1; i < args.length; i++) {
            List<String> argv = new ArrayList<>(Arrays.asList(args[i].trim().split("\\s+")));
            argv.add("-n");
            argv.add(args[0]);
            ByteArrayOutputStream captured = new ByteArrayOutputStream();
            PrintStream sink = new PrintStream(captured, true, StandardCharsets.UTF_8);
            System.setOut(sink);
            System.setErr(sink);
            String error = null;
            try {
                MQAdminStartup.main0(argv.toArray(new String[0]), null);
            } catch (Throwable e) {
                error = e.toString();
            } finally {
                System.setOut(out);
                System.setErr(err);
            }
            Map<String, Object> line = new LinkedHashMap<>();
            line.put("command", args[i]);
            line.put("output", captured.toString(StandardCharsets.UTF_8));
            line.put("error", error);
            out.println(JSON.toJSONString(line));
            out.flush();
        }
        System.exit(0);
    }
}
