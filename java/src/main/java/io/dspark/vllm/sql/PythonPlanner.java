package io.dspark.vllm.sql;

import io.dspark.vllm.plan.Plan;
import io.dspark.vllm.plan.PlanReader;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.flink.table.api.ValidationException;
import org.apache.flink.table.catalog.Column;
import org.apache.flink.table.catalog.ObjectIdentifier;
import org.apache.flink.table.catalog.ResolvedCatalogModel;
import org.apache.flink.table.catalog.ResolvedCatalogTable;
import org.apache.flink.table.catalog.ResolvedSchema;
import org.apache.flink.table.types.logical.ArrayType;
import org.apache.flink.table.types.logical.CharType;
import org.apache.flink.table.types.logical.DecimalType;
import org.apache.flink.table.types.logical.LocalZonedTimestampType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.MapType;
import org.apache.flink.table.types.logical.RowType;
import org.apache.flink.table.types.logical.TimeType;
import org.apache.flink.table.types.logical.TimestampType;
import org.apache.flink.table.types.logical.VarCharType;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

/**
 * Runs {@code python -m connector.plan} on the client: the declared table (options, columns, watermark)
 * goes in as JSON, the plan or the user's error comes out. Flink itself starts a Python process on the client the
 * same way to load a Python UDF from SQL, with the same option: {@code python.client.executable}.
 */
final class PythonPlanner {

    static final String MODULE = "connector.plan";
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final long TIMEOUT_SECONDS = 120;
    // The planner asks for the same table several times while it plans one statement: answers are kept for a few
    // seconds, by a digest of the question (never its text, which may hold an API key), so a long-lived SQL
    // Gateway still reads an edited profile or a rotated 'api-key.file' at the next statement.
    private static final long CACHE_MILLIS = 10_000;
    private static final Map<String, Cached> CACHE = new ConcurrentHashMap<>();

    private static final class Cached {
        final JsonNode answer;
        final long until;

        Cached(JsonNode answer, long until) {
            this.answer = answer;
            this.until = until;
        }
    }

    private PythonPlanner() {}

    static TablePlan plan(ObjectIdentifier identifier, ResolvedCatalogTable table, Map<String, String> config) {
        JsonNode answer = ask(identifier, declaredTable(identifier, table, config), config, CONNECTOR);
        return new TablePlan(answer, identifier);
    }

    /**
     * The payload of the table's parse function in a Python worker (a pickle, made by Python's pickle:
     * {@code connector.flink.runtime.function_payload}) producing {@code columns}, in their order.
     */
    static byte[] parseFunction(TablePlan plan, List<String> columns, Map<String, String> config) {
        ObjectNode question = JSON.createObjectNode();
        ObjectNode function = question.putObject("parse_function");
        function.set("plan", plan.plan.plan);
        ArrayNode names = function.putArray("columns");
        columns.forEach(names::add);
        JsonNode answer = ask(plan.identifier, question, config, CONNECTOR);
        return java.util.Base64.getDecoder().decode(answer.get("payload").asText());
    }

    /**
     * What the native core reads for a scan of the table that reads {@code physical} and {@code metadata} (its
     * projection): {@code connector.plan.parse.table_read}, the planner's narrowing of the core's plan document.
     */
    static Plan.NativeRead tableRead(
            TablePlan plan, List<String> physical, List<String> metadata, Map<String, String> config) {
        ObjectNode question = JSON.createObjectNode();
        ObjectNode read = question.putObject("native_read");
        read.set("table", plan.json);
        physical.forEach(read.putArray("physical")::add);
        metadata.forEach(read.putArray("metadata")::add);
        return PlanReader.readNativeRead(ask(plan.identifier, question, config, CONNECTOR));
    }

    /**
     * What the native core reads for a table with {@code 'format' = 'dspark-vllm'} ({@code plan}: the format's plan
     * as the planner wrote it) whose query reads the {@code physical} columns:
     * {@code connector.plan.parse.format_read}.
     */
    static Plan.NativeRead formatRead(
            ObjectIdentifier identifier, JsonNode plan, List<String> physical, Map<String, String> config) {
        ObjectNode question = JSON.createObjectNode();
        ObjectNode read = question.putObject("native_read");
        read.set("format", plan);
        physical.forEach(read.putArray("physical")::add);
        return PlanReader.readNativeRead(ask(identifier, question, config, FORMAT));
    }

    /**
     * The plan of a table with {@code 'format' = 'dspark-vllm'}: the declared table with the format's options
     * (their prefix taken off) under "format"; the answer is {@code connector.plan.format.format_plan}'s.
     */
    static JsonNode formatPlan(
            ObjectIdentifier identifier, ResolvedCatalogTable table, Map<String, String> formatOptions,
            Map<String, String> config, java.util.Set<String> notInValue) {
        ObjectNode request = declaredTable(identifier, table, config);
        request.remove("options");
        // Columns the connector fills from elsewhere (a Kafka record's key) are not the format's to make.
        java.util.Iterator<JsonNode> columns = request.get("columns").elements();
        while (columns.hasNext()) {
            JsonNode column = columns.next();
            if ("physical".equals(column.get("kind").asText()) && notInValue.contains(column.get("name").asText())) {
                columns.remove();
            }
        }
        ObjectNode format = request.putObject("format");
        formatOptions.forEach(format::put);
        return ask(identifier, request, config, FORMAT);
    }

    /**
     * The plan of a model with {@code 'provider' = 'dspark-vllm'}: its options, INPUT and OUTPUT columns; the answer
     * is {@code connector.plan.model.model_plan}'s.
     */
    static JsonNode planModel(ObjectIdentifier identifier, ResolvedCatalogModel model, Map<String, String> config) {
        ObjectNode question = JSON.createObjectNode();
        question.put("model", identifier.getObjectName());
        ObjectNode options = question.putObject("options");
        model.getOptions().forEach(options::put);
        question.set("input", columns(model.getResolvedInputSchema()));
        question.set("output", columns(model.getResolvedOutputSchema()));
        return ask(identifier, question, config, MODEL);
    }

    private static ArrayNode columns(ResolvedSchema schema) {
        ArrayNode columns = JSON.createArrayNode();
        for (Column column : schema.getColumns()) {
            ObjectNode node = columns.addObject();
            node.put("name", column.getName());
            node.set("type", type(column.getDataType().getLogicalType()));
            column.getComment().ifPresent(c -> node.put("comment", c));
        }
        return columns;
    }

    static final String MODEL = "('provider' = 'dspark-vllm')";
    static final String CONNECTOR = "('connector' = 'dspark-vllm')";
    static final String FORMAT = "('format' = 'dspark-vllm')";

    private static JsonNode ask(
            ObjectIdentifier identifier, ObjectNode question, Map<String, String> config, String what) {
        String request = question.toString();
        String python = pythonExecutable(config);
        String key = digest(python + "\0" + request);
        long now = System.currentTimeMillis();
        CACHE.values().removeIf(c -> c.until < now);
        Cached cached = CACHE.get(key);
        JsonNode answer = cached == null ? null : cached.answer;
        if (answer == null) {
            answer = run(python, request, identifier, what);
            CACHE.put(key, new Cached(answer, now + CACHE_MILLIS));
        }
        if (answer.has("error")) {
            // One line: the SQL Client and the Gateway show the message as it is, and some of the planner's, in
            // Flink's wording, list options or columns a line each.
            throw new ValidationException(oneLine(
                    noun(what) + " '" + identifier.asSummaryString() + "' " + what + ": " + answer.get("error").asText()));
        }
        return answer;
    }

    /** {@code text} on one line: its line breaks, and the blanks around them, become one space. */
    static String oneLine(String text) {
        return text.strip().replaceAll("\\s*\\R\\s*", " ");
    }

    private static String digest(String text) {
        try {
            byte[] hash = MessageDigest.getInstance("SHA-256").digest(text.getBytes(StandardCharsets.UTF_8));
            return java.util.Base64.getEncoder().encodeToString(hash);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** python.client.executable, then $PYFLINK_CLIENT_EXECUTABLE, then python.executable, then python3. */
    static String pythonExecutable(Map<String, String> config) {
        String configured = config.get("python.client.executable");
        if (configured != null && !configured.isBlank()) {
            return configured;
        }
        String fromEnv = System.getenv("PYFLINK_CLIENT_EXECUTABLE");
        if (fromEnv != null && !fromEnv.isBlank()) {
            return fromEnv;
        }
        String worker = config.get("python.executable");
        return worker != null && !worker.isBlank() ? worker : "python3";
    }

    static ObjectNode declaredTable(
            ObjectIdentifier identifier, ResolvedCatalogTable table, Map<String, String> config) {
        ObjectNode root = JSON.createObjectNode();
        root.put("name", identifier.getObjectName());
        // The job settings the plan depends on: checked against (checkpoint timeout vs the longest request, the
        // target), and the TaskManagers' external resources ('parse.backend' = 'auto' parses in Python for GPUs).
        ObjectNode flink = root.putObject("flink");
        config.forEach((key, value) -> {
            if (key.startsWith("execution.") || key.startsWith("external-resource")) {
                flink.put(key, value);
            }
        });
        ObjectNode options = root.putObject("options");
        table.getOptions().forEach(options::put);
        ResolvedSchema schema = table.getResolvedSchema();
        ArrayNode columns = root.putArray("columns");
        for (Column column : schema.getColumns()) {
            ObjectNode node = columns.addObject();
            node.put("name", column.getName());
            if (column instanceof Column.MetadataColumn) {
                node.put("kind", "metadata");
                node.put("key", ((Column.MetadataColumn) column).getMetadataKey().orElse(column.getName()));
            } else if (column instanceof Column.ComputedColumn) {
                node.put("kind", "computed");
            } else {
                node.put("kind", "physical");
            }
            node.set("type", type(column.getDataType().getLogicalType()));
            column.getComment().ifPresent(c -> node.put("comment", c));
        }
        if (schema.getWatermarkSpecs().isEmpty()) {
            root.putNull("watermark");
        } else {
            root.put("watermark", schema.getWatermarkSpecs().get(0).getRowtimeAttribute());
        }
        return root;
    }

    private static ObjectNode type(LogicalType logical) {
        ObjectNode node = JSON.createObjectNode();
        node.put("sql", logical.asSerializableString());
        node.put("root", logical.getTypeRoot().name());
        node.put("nullable", logical.isNullable());
        if (logical instanceof RowType) {
            ArrayNode fields = node.putArray("fields");
            for (RowType.RowField field : ((RowType) logical).getFields()) {
                ObjectNode f = fields.addObject();
                f.put("name", field.getName());
                f.set("type", type(field.getType()));
                field.getDescription().ifPresent(d -> f.put("description", d));
            }
        } else if (logical instanceof ArrayType) {
            node.set("element", type(((ArrayType) logical).getElementType()));
        } else if (logical instanceof MapType) {
            node.set("key", type(((MapType) logical).getKeyType()));
            node.set("value", type(((MapType) logical).getValueType()));
        } else if (logical instanceof VarCharType) {
            node.put("length", ((VarCharType) logical).getLength());
        } else if (logical instanceof CharType) {
            node.put("length", ((CharType) logical).getLength());
        } else if (logical instanceof DecimalType) {
            node.put("precision", ((DecimalType) logical).getPrecision());
            node.put("scale", ((DecimalType) logical).getScale());
        } else if (logical instanceof TimeType) {
            node.put("precision", ((TimeType) logical).getPrecision());
        } else if (logical instanceof TimestampType) {
            node.put("precision", ((TimestampType) logical).getPrecision());
        } else if (logical instanceof LocalZonedTimestampType) {
            node.put("precision", ((LocalZonedTimestampType) logical).getPrecision());
        }
        return node;
    }

    private static JsonNode run(String python, String request, ObjectIdentifier identifier, String what) {
        ProcessBuilder builder = new ProcessBuilder(List.of(python, "-m", MODULE));
        Process process;
        try {
            process = builder.start();
        } catch (IOException e) {
            throw new ValidationException(hint(identifier, what, python, "cannot start it: " + e.getMessage()));
        }
        try {
            // Read both streams while writing, so that a chatty stderr never blocks the child.
            StreamReader out = new StreamReader(process.getInputStream());
            StreamReader err = new StreamReader(process.getErrorStream());
            out.start();
            err.start();
            try (OutputStream in = process.getOutputStream()) {
                in.write(request.getBytes(StandardCharsets.UTF_8));
            }
            if (!process.waitFor(TIMEOUT_SECONDS, TimeUnit.SECONDS)) {
                process.destroyForcibly();
                throw new ValidationException(hint(identifier, what, python, "no answer in " + TIMEOUT_SECONDS + " s"));
            }
            out.join();
            err.join();
            String stdout = out.text().trim();
            if (process.exitValue() != 0 || stdout.isEmpty()) {
                throw new ValidationException(hint(identifier, what, python, lastLine(err.text())));
            }
            return JSON.readTree(stdout);
        } catch (IOException e) {
            throw new ValidationException(hint(identifier, what, python, e.getMessage()));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            process.destroyForcibly();
            throw new ValidationException(hint(identifier, what, python, "interrupted"));
        }
    }

    private static String noun(String what) {
        return MODEL.equals(what) ? "Model" : "Table";
    }

    private static String hint(ObjectIdentifier identifier, String label, String python, String what) {
        return noun(label) + " '" + identifier.asSummaryString() + "' " + label + " is planned by Python on "
                + "the client, and '" + python + " -m " + MODULE + "' failed: " + what + ". Set "
                + "'python.client.executable' to a Python that has dspark-vllm installed.";
    }

    private static String lastLine(String text) {
        String[] lines = text.strip().split("\n");
        return lines.length == 0 || lines[lines.length - 1].isBlank() ? "no output" : lines[lines.length - 1];
    }

    /** Drains a stream in a thread. */
    private static final class StreamReader extends Thread {
        private final InputStream stream;
        private final ByteArrayOutputStream buffer = new ByteArrayOutputStream();

        StreamReader(InputStream stream) {
            this.stream = stream;
            setDaemon(true);
        }

        @Override
        public void run() {
            try {
                stream.transferTo(buffer);
            } catch (IOException ignored) {
                // the process died; what was read is kept
            }
        }

        String text() {
            return buffer.toString(StandardCharsets.UTF_8);
        }
    }
}
