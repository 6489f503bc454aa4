import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

import org.apache.kafka.common.utils.internals.Exit;
import org.apache.kafka.tools.AclCommand;

/**
 * Kafka's {@code kafka-acls.sh} ({@code AclCommand}) run once per line of standard input,
 * all in this one JVM (a JVM start costs more than the command's work): a line is one
 * run's arguments separated by tabs; the answer, on standard output, is a line
 * {@code === <exit status> <stdout bytes> <stderr bytes>} and then the run's standard
 * output and standard error. The next line is read only once the answer is written, so
 * the caller can look at the broker between runs. The command ends through Kafka's
 * {@code Exit}, made to return here instead of exiting (AclCommand catches that, prints
 * it and exits again: the first status, and what was printed before it, are the command's).
 * tests/kafka/test_acl_command.py runs it.
 */
public final class AclCommandRows {
    private static final class CommandExit extends RuntimeException {
        CommandExit() {
            super(null, null, false, false);
        }
    }

    private static Integer firstExit;
    private static ByteArrayOutputStream out;
    private static ByteArrayOutputStream err;
    private static int outAtExit;
    private static int errAtExit;

    public static void main(String[] argv) throws Exception {
        Exit.Procedure exit = (status, message) -> {
            if (firstExit == null) {
                firstExit = status;
                System.out.flush();
                System.err.flush();
                outAtExit = out.size();
                errAtExit = err.size();
            }
            throw new CommandExit();
        };
        Exit.setExitProcedure(exit);
        Exit.setHaltProcedure(exit);
        BufferedReader rows = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        System.setIn(new ByteArrayInputStream(new byte[0])); // a --remove without --force asks: no answer, not the next row
        PrintStream answers = System.out;
        PrintStream errors = System.err;
        for (String row; (row = rows.readLine()) != null; ) {
            out = new ByteArrayOutputStream();
            err = new ByteArrayOutputStream();
            System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
            System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
            firstExit = null;
            int status = 0;
            try {
                AclCommand.main(row.isEmpty() ? new String[0] : row.split("\t", -1));
            } catch (CommandExit e) {
                status = firstExit;
            } catch (Throwable e) {
                e.printStackTrace();
                status = 99;
            } finally {
                System.out.flush();
                System.err.flush();
                System.setOut(answers);
                System.setErr(errors);
            }
            int outSize = firstExit != null ? outAtExit : out.size();
            int errSize = firstExit != null ? errAtExit : err.size();
            answers.println("=== " + status + " " + outSize + " " + errSize);
            answers.write(out.toByteArray(), 0, outSize);
            answers.write(err.toByteArray(), 0, errSize);
            answers.flush();
        }
        Runtime.getRuntime().halt(0); // the command's admin clients leave threads behind
    }
}
