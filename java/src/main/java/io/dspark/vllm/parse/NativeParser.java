package io.dspark.vllm.parse;

import io.dspark.vllm.plan.Plan;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Batches of bodies through the native core, for what the planner made it read ({@code Plan.NativeRead},
 * {@code connector.plan.parse.native_read}): the core's plan document, already narrowed to the columns a query
 * reads and with {@code explain} (so that the core alone decides every body: a row, or the reason and field the
 * Python backends give), handed to the core as it is; and the named columns of the core's result with their types,
 * in the core's order. Not thread-safe: one per operator instance (its buffers are reused).
 */
public final class NativeParser {

    /** What the core adds beside the plan's columns: the verdict and, for bodies that are no row, why. */
    // Keys of the core's own columns in a part: not their names in the result (a content property may be named
    // "reason" or "verdict" too), found there by position (dspark_core.h: after the plan's columns and
    // properties, verdict, reason, field, then with content content_verdict and content_error).
    public static final String VERDICT = "\u0000verdict";
    public static final String REASON = "\u0000reason";
    public static final String FIELD = "\u0000field";
    /** Why a content is not what its properties say (a row, not an error row). */
    public static final String CONTENT_ERROR = "content_error";

    private final byte[] plan;
    private final Map<String, char[]> types = new LinkedHashMap<>(); // name -> {type, item type}
    private final List<String> named = new ArrayList<>(); // the plan's named result columns
    private final int planColumns; // the plan's columns and properties: the core's own columns follow them
    private final boolean readsContent;
    /** Bodies given to the core in one call, at most (a larger body goes alone). */
    static final long CALL_BYTES = 64L << 20;

    /** {@code read}: the planner's document and the core's named result columns, content_error last with content. */
    public NativeParser(Plan.NativeRead read) {
        plan = read.document.getBytes(StandardCharsets.UTF_8);
        for (Plan.CoreColumn column : read.columns) {
            types.put(column.name, new char[] {code(column.type), column.item == null ? ' ' : code(column.item)});
            named.add(column.name);
        }
        readsContent = types.containsKey(CONTENT_ERROR);
        planColumns = named.size() - (readsContent ? 1 : 0);
        types.put(VERDICT, new char[] {CoreContract.RESULT_INT8, ' '});
        types.put(REASON, new char[] {CoreContract.RESULT_UTF8, ' '});
        types.put(FIELD, new char[] {CoreContract.RESULT_UTF8, ' '});
    }

    private static char code(String type) {
        if (type.length() != 1) {
            throw new IllegalArgumentException("the plan's native result type '" + type + "' is no type code of "
                    + "the native core: install the same dspark-vllm on the client and the TaskManagers");
        }
        return type.charAt(0);
    }

    /** The named columns of the core's result (the plan's columns, content properties, content_error). */
    public List<String> columns() {
        return java.util.Collections.unmodifiableList(named);
    }

    /**
     * Refuses, in one line, the columns of {@code wanted} that the plan does not read (the planner decides what
     * the core reads for a query's row: {@code connector.plan.parse.core_columns}).
     */
    public void require(Collection<String> wanted) {
        List<String> missing = new ArrayList<>(wanted);
        missing.removeAll(named);
        if (!missing.isEmpty()) {
            throw new IllegalArgumentException("dspark-vllm: the native core's plan reads no columns " + missing
                    + " that the row reads (it reads " + named + "); please report it");
        }
    }

    /**
     * The columns of the bodies {@code bodies[from..to)} (null for a missing one, read as empty), in parts of
     * consecutive bodies: one part, unless the columns of a part would outgrow Arrow's 2 GiB. Throws
     * IndexOutOfBoundsException unless {@code 0 <= from <= to <= bodies.length} ({@code bodies} may be null when
     * {@code from == to == 0}).
     */
    public List<Map<String, ArrowColumn>> parse(byte[][] bodies, int from, int to) {
        // Checked here: a range with from > to reached the JNI shim as a negative count of bodies.
        java.util.Objects.checkFromToIndex(from, to, bodies == null ? 0 : bodies.length);
        List<Map<String, ArrowColumn>> parts = new ArrayList<>();
        read(bodies, from, to, parts);
        return parts;
    }

    private void read(byte[][] bodies, int from, int to, List<Map<String, ArrowColumn>> parts) {
        // At most CALL_BYTES of bodies a call (one larger body alone): the core's copy and its columns stay
        // bounded whatever the batch holds.
        long total = 0;
        for (int i = from; i < to; i++) {
            total += bodies[i] == null ? 0 : bodies[i].length;
            if (total > CALL_BYTES && i > from) {
                read(bodies, from, i, parts);
                read(bodies, i, to, parts);
                return;
            }
        }
        int n = to - from;
        try (NativeCore.Result result = NativeCore.parse(plan, bodies, from, to)) {
            // Too much for one call (a column over 2 GiB, out of memory, all columns over what one Java array
            // holds): fewer bodies at a time, down to one body, whose failure is its own error row. One body must
            // not cost its batch (Python's parse_batch does the same).
            String failed = null;
            Map<String, ArrowColumn> all = null;
            if (result.code == CoreContract.OUTPUT_TOO_LARGE || result.code == CoreContract.INTERNAL) {
                failed = result.message;
            } else if (result.code != CoreContract.DONE) {
                throw new IllegalStateException(
                        "native parser core: " + result.message + " (code " + result.code + ")");
            } else {
                try {
                    all = byKey(result.columns());
                } catch (IllegalStateException | OutOfMemoryError e) {
                    failed = e.getMessage();
                }
            }
            if (failed != null) {
                if (n > 1) {
                    read(bodies, from, from + n / 2, parts);
                    read(bodies, from + n / 2, to, parts);
                } else {
                    parts.add(errorPart("internal error (the native core could not read this body: " + failed
                            + "); please report it with this body"));
                }
                return;
            }
            Map<String, ArrowColumn> out = new HashMap<>();
            for (String name : types.keySet()) {
                ArrowColumn column = all.get(name);
                char[] expected = types.get(name);
                if (column == null || column.type != expected[0] || (column.child != null && column.child.type != expected[1])) {
                    throw new IllegalStateException(
                            "the native core's result has no column '" + name + "' of type " + expected[0]
                                    + ": it is not of ABI "
                                    + CoreContract.ABI_VERSION);
                }
                out.put(name, column);
            }
            parts.add(out);
        }
    }

    /** The result's columns by key: the plan's by name, the core's own by position (see VERDICT). */
    private Map<String, ArrowColumn> byKey(List<Map.Entry<String, ArrowColumn>> ordered) {
        Map<String, ArrowColumn> all = new HashMap<>();
        if (ordered.size() != planColumns + (readsContent ? 5 : 3)) {
            return all; // not this plan's result: the check of the types names what is missing
        }
        for (int i = 0; i < planColumns; i++) {
            all.put(ordered.get(i).getKey(), ordered.get(i).getValue());
        }
        all.put(VERDICT, ordered.get(planColumns).getValue());
        all.put(REASON, ordered.get(planColumns + 1).getValue());
        all.put(FIELD, ordered.get(planColumns + 2).getValue());
        if (readsContent) {
            all.put(CONTENT_ERROR, ordered.get(planColumns + 4).getValue());
        }
        return all;
    }

    /** One body's columns, all null but its reason: an error row the core could not give (no verdict either). */
    private Map<String, ArrowColumn> errorPart(String reason) {
        java.io.ByteArrayOutputStream bytes = new java.io.ByteArrayOutputStream();
        java.nio.ByteBuffer b = java.nio.ByteBuffer.allocate(16).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        java.util.function.IntConsumer int32 = v -> bytes.write(b.clear().putInt(v).array(), 0, 4);
        java.util.function.LongConsumer int64 = v -> bytes.write(b.clear().putLong(v).array(), 0, 8);
        int32.accept(types.size());
        for (Map.Entry<String, char[]> entry : types.entrySet()) {
            byte[] name = entry.getKey().getBytes(java.nio.charset.StandardCharsets.UTF_8);
            int32.accept(name.length);
            bytes.write(name, 0, name.length);
            char type = entry.getValue()[0];
            byte[] value = entry.getKey().equals(REASON)
                    ? reason.getBytes(java.nio.charset.StandardCharsets.UTF_8)
                    : null;
            boolean valid = value != null;
            bytes.write(type);
            int64.accept(1); // length
            int64.accept(0); // offset
            int32.accept(1); // one validity byte
            bytes.write(valid ? 1 : 0);
            switch (type) {
                case CoreContract.RESULT_UTF8:
                    int32.accept(0);
                    int32.accept(value == null ? 0 : value.length);
                    int64.accept(value == null ? 0 : value.length);
                    if (value != null) {
                        bytes.write(value, 0, value.length);
                    }
                    break;
                case CoreContract.RESULT_INT64:
                case CoreContract.RESULT_FLOAT64:
                    int64.accept(0);
                    break;
                case CoreContract.RESULT_BOOL:
                    bytes.write(0);
                    break;
                case CoreContract.RESULT_INT8:
                    bytes.write(0);
                    break;
                case CoreContract.RESULT_LIST: // an empty list, then its child: no values
                    int32.accept(0);
                    int32.accept(0);
                    bytes.write(entry.getValue()[1]);
                    int64.accept(0);
                    int64.accept(0);
                    int32.accept(0);
                    if (entry.getValue()[1] == CoreContract.RESULT_UTF8) {
                        int32.accept(0);
                        int64.accept(0);
                    }
                    break;
                default:
                    throw new IllegalStateException("no Arrow type '" + type + "'");
            }
        }
        return new HashMap<>(ArrowColumn.all(bytes.toByteArray()));
    }
}
