import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.apache.kafka.common.utils.internals.Exit;

/**
 * Kafka's command-line tools, several in one JVM (a JVM start costs more than most
 * tools' work): {@code KafkaTools <main class> <args>... --- <main class> <args>...}.
 * Each tool's standard output is printed after a line {@code === <exit status>}; a tool
 * ends through Kafka's {@code Exit}, which is made to return here instead of exiting
 * (some tools catch that and exit again: the first status is the tool's).
 * tests/kafka/test_java_clients.py runs it (tests/kafka/real_kafka.py's JavaPrograms).
 */
public final class KafkaTools {
    private static final class ToolExit extends RuntimeException {
        final int status;

        ToolExit(int status) {
            super(null, null, false, false);
            this.status = status;
        }
    }

    private static Integer firstExit;

    public static void main(String[] argv) throws Exception {
        Exit.setExitProcedure((status, message) -> {
            if (firstExit == null) {
                firstExit = status;
            }
            throw new ToolExit(status);
        });
        PrintStream out = System.out;
        for (List<String> run : split(argv)) {
            ByteArrayOutputStream captured = new ByteArrayOutputStream();
            System.setOut(new PrintStream(captured, true, StandardCharsets.UTF_8));
            int status = 0;
            firstExit = null;
            try {
                Class.forName(run.get(0)).getMethod("main", String[].class)
                    .invoke(null, (Object) run.subList(1, run.size()).toArray(new String[0]));
            } catch (InvocationTargetException e) {
                if (e.getCause() instanceof ToolExit) {
                    status = ((ToolExit) e.getCause()).status;
                } else {
                    e.getCause().printStackTrace();
                    status = 99;
                }
            } finally {
                System.out.flush();
                System.setOut(out);
            }
            out.println("=== " + (firstExit != null ? firstExit : status));
            out.print(captured.toString(StandardCharsets.UTF_8));
        }
        out.flush();
        Runtime.getRuntime().halt(0); // the tools' admin clients leave threads behind
    }

    private static List<List<String>> split(String[] argv) {
        List<List<String>> runs = new ArrayList<>();
        List<String> current = new ArrayList<>();
        for (String arg : Arrays.asList(argv)) {
            if (arg.equals("---")) {
                runs.add(current);
                current = new ArrayList<>();
            } else {
                current.add(arg);
            }
        }
        runs.add(current);
        return runs;
    }
}
