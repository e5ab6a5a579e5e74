package io.dspark.vllm.parse;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;

import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;
import java.util.Map;

/**
 * The JVM side of tests/test_java_native.py: reads what the planner made the core read (a
 * {@code Plan.NativeRead}, {@code connector.plan.parse.native_read}), column names and bodies (one base64 line
 * each), parses them with {@link NativeParser} in batches of the given size, and prints one JSON line per body
 * with what the JVM read: every column's value (utf8 as text, lists as arrays), error_reason and error_field; a line
 * "---" ends each case.
 *
 * <pre>NativeCheck BATCH [PLAN_FILE COLUMNS(comma-separated) BODIES_FILE]...</pre>
 */
public final class NativeCheck {

    public static void main(String[] args) throws Exception {
        String problem = NativeCore.available();
        if (problem != null) {
            System.out.println("{\"unavailable\": " + new ObjectMapper().writeValueAsString(problem) + "}");
            return;
        }
        int batch = Integer.parseInt(args[0]);
        StringBuilder out = new StringBuilder();
        for (int at = 1; at + 2 < args.length; at += 3) {
            check(args[at], args[at + 1], args[at + 2], batch, out);
            out.append("---\n");
        }
        System.out.print(out);
    }

    private static void check(String planFile, String names, String bodiesFile, int batch, StringBuilder out)
            throws Exception {
        List<String> columns = names.isEmpty() ? List.of() : Arrays.asList(names.split(","));
        List<byte[]> bodies = new ArrayList<>();
        for (String line : Files.readAllLines(Paths.get(bodiesFile))) {
            bodies.add(line.equals("-") ? null : Base64.getDecoder().decode(line));
        }
        NativeParser parser = new NativeParser(PythonPlan.read(Paths.get(planFile)));
        ObjectMapper json = new ObjectMapper();
        byte[][] all = bodies.toArray(new byte[0][]);
        for (int from = 0; from < all.length; from += batch) {
            int to = Math.min(all.length, from + batch);
            for (Map<String, ArrowColumn> part : parser.parse(all, from, to)) {
                int n = part.get(NativeParser.REASON).length;
                for (int i = 0; i < n; i++) {
                    ObjectNode row = json.createObjectNode();
                    for (String name : columns) {
                        put(row, name, part.get(name), i);
                    }
                    put(row, "error_reason", part.get(NativeParser.REASON), i);
                    put(row, "error_field", part.get(NativeParser.FIELD), i);
                    out.append(json.writeValueAsString(row)).append('\n');
                }
            }
        }
    }

    private static void put(ObjectNode row, String name, ArrowColumn column, int i) {
        if (column.isNull(i)) {
            row.putNull(name);
            return;
        }
        switch (column.type) {
            case 'u':
                row.put(name, column.getString(i));
                break;
            case 'l':
                row.put(name, column.getLong(i));
                break;
            case 'g':
                row.put(name, column.getDouble(i));
                break;
            case 'b':
                row.put(name, column.getBoolean(i));
                break;
            case 'c':
                row.put(name, column.getByte(i));
                break;
            case '+': {
                ArrayNode items = row.putArray(name);
                ArrowColumn child = column.child;
                for (int j = column.start(i); j < column.end(i); j++) {
                    ObjectNode holder = new ObjectMapper().createObjectNode();
                    put(holder, "v", child, j);
                    items.add(holder.get("v"));
                }
                break;
            }
            default:
                throw new IllegalStateException("type " + column.type);
        }
    }
}
