package io.dspark.vllm.sql;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.PipelineOptions;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.TableEnvironment;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.ResultKind;

import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.table.api.internal.TableResultInternal;
import org.apache.flink.table.catalog.ResolvedSchema;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.utils.print.PrintStyle;
import org.apache.flink.table.utils.print.TableauStyle;
import org.apache.flink.util.CloseableIterator;

import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
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
 *   flink run -c io.dspark.vllm.sql.SqlRunner dspark-vllm-flink.jar job.sql
 *   java -cp "$FLINK_LIB/*:flink-python.jar:dspark-vllm-flink.jar" io.dspark.vllm.sql.SqlRunner job.sql key=value...
 * </pre>
 *
 * {@code SET 'key' = 'value';} statements and {@code key=value} arguments configure the session. Results of queries
 * are printed; the runner waits for the jobs it submitted and exits 1 with a one-line message if a statement fails
 * (with {@code -Ddspark.verbose=true}, after its stack trace).
 */
public final class SqlRunner {

    private static final Pattern SET =
            Pattern.compile("SET\\s+('(?:[^']|'')*')\\s*=\\s*('(?:[^']|'')*')", Pattern.CASE_INSENSITIVE | Pattern.DOTALL);

    private SqlRunner() {}

    private static String unquote(String literal) {
        return literal.substring(1, literal.length() - 1).replace("''", "'");
    }

    public static void main(String[] args) {
        // Every line printed here (a query's rows, SHOW CREATE, messages, stack traces) masked: Flink repeats a
        // table's options, secrets too, in its planning errors.
        System.setOut(Secrets.masking(System.out));
        System.setErr(Secrets.masking(System.err));
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
        // Jars in 'pipeline.jars' join the session as ADD JAR does (the SQL Client's -j): Flink finds the factories
        // in them (another connector, such as Kafka's) and ships them with the jobs. Given only as the option, they
        // were shipped but their connectors were not found ("Could not find any factory for identifier 'kafka'").
        List<String> jars = config.getOptional(PipelineOptions.JARS).orElse(List.of());
        config.removeConfig(PipelineOptions.JARS);
        TableEnvironment t =
                TableEnvironment.create(EnvironmentSettings.newInstance().inStreamingMode().withConfiguration(config).build());
        for (String jar : jars) {
            try {
                t.executeSql("ADD JAR '" + jar.replace("'", "''") + "'");
            } catch (RuntimeException e) {
                System.err.println("SqlRunner: cannot add the jar " + jar + " ('pipeline.jars'): "
                        + PythonPlanner.oneLine(String.valueOf(e.getMessage())));
                System.exit(2);
            }
        }
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
                    print(result, t.getConfig().getConfiguration()); // waits for a bounded query to end
                } else if (result.getJobClient().isPresent()) {
                    System.err.println("SqlRunner: statement " + n + " submitted job "
                            + result.getJobClient().get().getJobID());
                    jobs.add(result);
                    jobStatements.add(n);
                } else if (result.getResultKind() == ResultKind.SUCCESS_WITH_CONTENT) {
                    print(result, t.getConfig().getConfiguration());
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

    /** The SQL Client's setting of the widest printed column; unset, values are printed whole. */
    private static final String MAX_COLUMN_WIDTH = "sql-client.display.max-column-width";
    /** The column an error row has set, as ML_PREDICT's OUTPUT, a table's metadata column or its alias name it. */
    private static final List<String> ERROR_COLUMNS = List.of("error.reason", "error_reason", "error");

    /**
     * A result's rows as a table, as the SQL Client's tableau mode prints them but with values whole (Flink's
     * {@code TableResult.print()} cuts each at 30 characters: an error row read {@code request failed: connect:
     * th...}), then a line that counts the rows and, where the result has an error column, the error rows.
     */
    static void print(TableResult result, Configuration session) {
        ResolvedSchema schema = result.getResolvedSchema();
        int width = session.getOptional(ConfigOptions.key(MAX_COLUMN_WIDTH).intType().noDefaultValue())
                .orElse(Integer.MAX_VALUE);
        TableResultInternal internal = (TableResultInternal) result;
        List<RowData> rows = new ArrayList<>();
        try (CloseableIterator<RowData> it = internal.collectInternal()) {
            it.forEachRemaining(rows::add);
        } catch (Exception e) {
            throw e instanceof RuntimeException ? (RuntimeException) e : new RuntimeException(e);
        }
        PrintWriter out = new PrintWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), true);
        if (!rows.isEmpty()) {
            TableauStyle style = PrintStyle.tableauWithDataInferredColumnWidths(
                    schema, internal.getRowDataToStringConverter(), width, false, true);
            style.printTable(rows.iterator(), out);
        }
        out.println(countLine(schema.getColumnNames(), rows));
        out.flush();
    }

    /** "3 rows, 1 error row (error.reason set)"; "1 row"; "0 rows". */
    static String countLine(List<String> columns, List<RowData> rows) {
        String count = rows.size() + (rows.size() == 1 ? " row" : " rows");
        int at = -1;
        for (String name : ERROR_COLUMNS) {
            at = columns.indexOf(name);
            if (at >= 0) {
                break;
            }
        }
        if (at < 0 || rows.isEmpty()) {
            return count;
        }
        int errors = 0;
        for (RowData row : rows) {
            errors += row.isNullAt(at) ? 0 : 1;
        }
        return count + ", " + errors + (errors == 1 ? " error row" : " error rows") + " (" + columns.get(at)
                + " set)";
    }

    private static boolean isQuery(String statement) {
        String head = statement.stripLeading().split("\\s+", 2)[0].toUpperCase(Locale.ROOT);
        return List.of("SELECT", "WITH", "VALUES", "(", "SHOW", "EXPLAIN", "DESCRIBE", "DESC").contains(head);
    }

    private static void fail(int n, String statement, Exception e) {
        Throwable cause = e;
        StringBuilder message = new StringBuilder(withoutTraceback(String.valueOf(e.getMessage())));
        while (cause.getCause() != null && cause.getCause() != cause) {
            cause = cause.getCause();
            String text = cause.getMessage() == null ? null : withoutTraceback(cause.getMessage());
            if (text != null && !message.toString().contains(text)) {
                message.append(" <- ").append(text);
            }
        }
        String text = nearestOptions(withoutFactoryWrapper(message.toString()));
        // One line, the statement's beginning in it: Flink's messages hold line breaks (the lists of options
        // and keys). -Ddspark.verbose=true adds the stack trace (`dspark-vllm sql --verbose` sets it).
        String first = statement.strip().split("\\R", 2)[0].strip();
        if (first.length() > 60) {
            first = first.substring(0, 60).strip() + " ...";
        }
        if (Boolean.getBoolean("dspark.verbose")) {
            e.printStackTrace();
        }
        System.err.println("SqlRunner: statement " + n + " (" + first + ") failed: "
                + PythonPlanner.oneLine(text));
        System.exit(1);
    }

    /**
     * A Python exception that reached Flink through Py4J (a Python function's module refusing a name, e.g. the
     * retired {@code vllm_request}) carries its whole traceback in the message: its last line says what failed.
     * Our own errors ({@code connector.errors}) are said without their class.
     */
    static String withoutTraceback(String message) {
        int at = message.indexOf("Traceback (most recent call last):");
        if (at < 0) {
            return message;
        }
        String last = "";
        for (String line : message.substring(at).split("\\R")) {
            if (!line.isBlank()) {
                last = line.strip();
            }
        }
        return message.substring(0, at) + last.replaceFirst("^connector\\.errors\\.\\w+: ", "");
    }

    private static final Pattern FACTORY_WRAPPER = Pattern.compile(
            "Unable to create a [^\\n]*? for [^\\n]*?'\\.\\s+\\w+ options are:.*? <- ", Pattern.DOTALL);

    /**
     * Flink's "Unable to create a source for reading table 'x'. Table options are: 'k'='v' ..." (a model's alike)
     * around the factory's own message, left out: it repeats every option with its value, and the factory's
     * message, after it, says what is wrong.
     */
    static String withoutFactoryWrapper(String message) {
        return FACTORY_WRAPPER.matcher(message).replaceFirst("");
    }

    private static final Pattern UNSUPPORTED = Pattern.compile(
            "Unsupported options:\\s*\\R\\s*\\R(.*?)\\R\\s*\\RSupported options:\\s*\\R\\s*\\R(.*?)(?=\\R\\s*\\R|\\z)",
            Pattern.DOTALL);

    /**
     * Flink's "Unsupported options: ... Supported options: ..." (FactoryUtil's wording, of any connector) with the
     * nearest supported keys beside each unsupported one instead of the whole list (~60 keys hid the one meant).
     */
    static String nearestOptions(String message) {
        Matcher m = UNSUPPORTED.matcher(message);
        if (!m.find()) {
            return message;
        }
        List<String> supported = List.of(m.group(2).strip().split("\\s*\\R\\s*"));
        StringBuilder out = new StringBuilder("Unsupported options:\n\n");
        for (String key : m.group(1).strip().split("\\s*\\R\\s*")) {
            out.append(key);
            List<String> near = new ArrayList<>();
            int limit = Math.max(2, key.length() / 4);
            for (int d = 0; d <= limit && near.size() < 3; d++) {
                for (String candidate : supported) {
                    if (near.size() < 3 && distance(key, candidate) == d) {
                        near.add(candidate);
                    }
                }
            }
            if (!near.isEmpty()) {
                out.append(" (did you mean ").append(String.join(" or ", near)).append("?)");
            }
            out.append('\n');
        }
        out.append("\n(").append(supported.size()).append(" options are supported)");
        return message.substring(0, m.start()) + out + message.substring(m.end());
    }

    /** Levenshtein distance (edits that turn a into b). */
    static int distance(String a, String b) {
        int[] previous = new int[b.length() + 1];
        int[] current = new int[b.length() + 1];
        for (int j = 0; j <= b.length(); j++) {
            previous[j] = j;
        }
        for (int i = 1; i <= a.length(); i++) {
            current[0] = i;
            for (int j = 1; j <= b.length(); j++) {
                int swap = a.charAt(i - 1) == b.charAt(j - 1) ? 0 : 1;
                current[j] = Math.min(Math.min(current[j - 1] + 1, previous[j] + 1), previous[j - 1] + swap);
            }
            int[] t = previous;
            previous = current;
            current = t;
        }
        return previous[b.length()];
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
