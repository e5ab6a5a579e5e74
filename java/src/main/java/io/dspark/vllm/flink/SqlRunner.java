package io.dspark.vllm.flink;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.TableEnvironment;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.ResultKind;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Runs the statements of a {@code .sql} file through a {@link TableEnvironment}, as the SQL Client does without
 * its prompt (the Flink Kubernetes Operator's "SQL runner" pattern):
 *
 * <pre>
 *   flink run -c io.dspark.vllm.flink.SqlRunner dspark-vllm-flink.jar job.sql
 *   java -cp "$FLINK_LIB/*:flink-python.jar:dspark-vllm-flink.jar" io.dspark.vllm.flink.SqlRunner job.sql key=value...
 * </pre>
 *
 * {@code SET 'key' = 'value';} statements and {@code key=value} arguments configure the session. Results of queries
 * are printed; the runner waits for the jobs it submitted and exits 1 with a one-line message if a statement fails.
 */
public final class SqlRunner {

    private static final Pattern SET =
            Pattern.compile("SET\\s+('(?:[^']|'')*')\\s*=\\s*('(?:[^']|'')*')", Pattern.CASE_INSENSITIVE | Pattern.DOTALL);

    private SqlRunner() {}

    private static String unquote(String literal) {
        return literal.substring(1, literal.length() - 1).replace("''", "'");
    }

    public static void main(String[] args) {
        if (args.length < 1) {
            System.err.println("usage: SqlRunner FILE.sql [key=value ...]");
            System.exit(2);
        }
        Configuration config = new Configuration();
        for (int i = 1; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            if (kv.length != 2) {
                System.err.println("SqlRunner: expected key=value, got '" + args[i] + "'");
                System.exit(2);
            }
            config.setString(kv[0], kv[1]);
        }
        String script;
        try {
            script = Files.readString(Path.of(args[0]), StandardCharsets.UTF_8);
        } catch (java.nio.charset.CharacterCodingException e) {
            System.err.println("SqlRunner: cannot read " + args[0] + ": it is not UTF-8 text");
            System.exit(2);
            return;
        } catch (IOException e) {
            System.err.println("SqlRunner: cannot read " + args[0] + ": " + e.getMessage());
            System.exit(2);
            return;
        }
        TableEnvironment t =
                TableEnvironment.create(EnvironmentSettings.newInstance().inStreamingMode().withConfiguration(config).build());
        List<TableResult> jobs = new ArrayList<>();
        List<Integer> jobStatements = new ArrayList<>();
        List<String> statements = statements(script);
        int n = 0;
        for (String statement : statements) {
            n++;
            Matcher set = SET.matcher(statement);
            if (set.matches()) {
                // As the SQL Client does: TableEnvironment.executeSql has no SET.
                t.getConfig().getConfiguration().setString(unquote(set.group(1)), unquote(set.group(2)));
                continue;
            }
            try {
                TableResult result = t.executeSql(statement);
                if (isQuery(statement) && result.getResultKind() == ResultKind.SUCCESS_WITH_CONTENT) {
                    result.print(); // a query's rows (waits for a bounded query to end)
                } else if (result.getJobClient().isPresent()) {
                    System.err.println("SqlRunner: statement " + n + " submitted job "
                            + result.getJobClient().get().getJobID());
                    jobs.add(result);
                    jobStatements.add(n);
                } else if (result.getResultKind() == ResultKind.SUCCESS_WITH_CONTENT) {
                    result.print();
                }
            } catch (Exception e) {
                fail(n, statement, e);
            }
        }
        for (int j = 0; j < jobs.size(); j++) {
            try {
                jobs.get(j).await();
            } catch (Exception e) {
                // The statement that submitted the job that failed, not the last one of the file.
                int submitted = jobStatements.get(j);
                fail(submitted, statements.get(submitted - 1), e);
            }
        }
    }

    private static boolean isQuery(String statement) {
        String head = statement.stripLeading().split("\\s+", 2)[0].toUpperCase(Locale.ROOT);
        return List.of("SELECT", "WITH", "VALUES", "(", "SHOW", "EXPLAIN", "DESCRIBE", "DESC").contains(head);
    }

    private static void fail(int n, String statement, Exception e) {
        Throwable cause = e;
        StringBuilder message = new StringBuilder(String.valueOf(e.getMessage()));
        while (cause.getCause() != null && cause.getCause() != cause) {
            cause = cause.getCause();
            if (cause.getMessage() != null && !message.toString().contains(cause.getMessage())) {
                message.append(" <- ").append(cause.getMessage());
            }
        }
        // One line: Flink's messages hold line breaks (the lists of options and keys).
        System.err.println("SqlRunner: statement " + n + " failed: " + PythonPlanner.oneLine(message.toString()));
        if (Boolean.getBoolean("dspark.verbose")) {
            e.printStackTrace();
        } else {
            System.err.println("SqlRunner: (-Ddspark.verbose=true prints the stack trace)");
        }
        String first = statement.strip().split("\n")[0];
        System.err.println("  " + (first.length() > 200 ? first.substring(0, 200) + " ..." : first));
        System.exit(1);
    }

    private static boolean identifierPart(char c) {
        return Character.isLetterOrDigit(c) || c == '_' || c == '$';
    }

    /** Statements of a script: split at ';' outside quotes, comments and BEGIN ... END (CASE ... END too). */
    static List<String> statements(String script) {
        List<String> out = new ArrayList<>();
        StringBuilder current = new StringBuilder();
        int depth = 0; // inside BEGIN ... END
        int i = 0;
        while (i < script.length()) {
            char c = script.charAt(i);
            if (c == '-' && script.startsWith("--", i)) {
                int end = script.indexOf('\n', i);
                i = end < 0 ? script.length() : end;
                continue;
            }
            if (c == '/' && script.startsWith("/*", i)) {
                int end = script.indexOf("*/", i + 2);
                int after = end < 0 ? script.length() : end + 2;
                if (script.startsWith("/*+", i)) {
                    current.append(script, i, after); // a hint (/*+ OPTIONS(...) */) is part of the statement
                } else {
                    current.append(' '); // a comment separates tokens: SELECT/* c */1 is SELECT 1
                }
                i = after;
                continue;
            }
            if (c == '\'' || c == '"' || c == '`') {
                int end = i + 1;
                while (end < script.length()) {
                    if (script.charAt(end) == c) {
                        if (end + 1 < script.length() && script.charAt(end + 1) == c) {
                            end += 2; // doubled quote
                            continue;
                        }
                        break;
                    }
                    end++;
                }
                current.append(script, i, Math.min(end + 1, script.length()));
                i = end + 1;
                continue;
            }
            if (Character.isLetter(c) && (i == 0 || !identifierPart(script.charAt(i - 1)))) {
                int end = i;
                while (end < script.length() && identifierPart(script.charAt(end))) {
                    end++; // a whole identifier: use_case, end_time and case$1 are no CASE or END
                }
                String word = script.substring(i, end).toUpperCase(Locale.ROOT);
                if (word.equals("BEGIN") || word.equals("CASE")) {
                    depth++;
                } else if (word.equals("END") && depth > 0) {
                    depth--;
                }
                current.append(script, i, end);
                i = end;
                continue;
            }
            if (c == ';' && depth == 0) {
                if (!current.toString().isBlank()) {
                    out.add(current.toString().strip());
                }
                current.setLength(0);
                i++;
                continue;
            }
            current.append(c);
            i++;
        }
        if (!current.toString().isBlank()) {
            out.add(current.toString().strip());
        }
        return out;
    }
}
