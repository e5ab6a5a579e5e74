package io.dspark.vllm.engine;

import io.dspark.vllm.plan.Plan;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.DeserializationFeature;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.table.data.ArrayData;
import org.apache.flink.table.data.DecimalData;
import org.apache.flink.table.data.GenericArrayData;
import org.apache.flink.table.data.GenericMapData;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.data.TimestampData;
import org.apache.flink.table.data.binary.BinaryStringData;
import org.apache.flink.table.types.logical.ArrayType;
import org.apache.flink.table.types.logical.DecimalType;
import org.apache.flink.table.types.logical.LocalZonedTimestampType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.LogicalTypeRoot;
import org.apache.flink.table.types.logical.MapType;
import org.apache.flink.table.types.logical.RowType;
import org.apache.flink.table.types.logical.TimeType;
import org.apache.flink.table.types.logical.TimestampType;
import org.apache.flink.table.types.logical.utils.LogicalTypeChecks;

import java.io.Serializable;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.math.RoundingMode;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.time.format.DateTimeParseException;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The answer check: the one owner of what an answer's typed fields must be. A query's answer fields (declared
 * columns that are neither profile columns nor metadata keys: {@code connector.types.answer}) are content
 * properties of the answer's profile, which the native core reads and types; this holds each value to its
 * declared Flink type and to the JSON Schema the request carried (ranges, lengths, {@code enum}, item counts,
 * required fields, the date and time forms), and makes a row that does not keep them an error row that names the
 * field: an answer cut by {@code max_tokens}, a refusal, content that is no JSON object or does not match. A nested
 * field (ROW, MAP, arrays of them) comes from the core as its JSON text (which the core read under the JSON rules)
 * and is mapped onto its declared type here. Never a half-typed row: an error row has every answer field NULL.
 */
final class Answers implements Serializable {
    private static final long serialVersionUID = 1L;
    private static final ObjectMapper JSON = new ObjectMapper()
            .enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS)
            .enable(DeserializationFeature.USE_BIG_INTEGER_FOR_INTS);
    static final String PREFIX = "the answer does not keep its schema: ";

    /** What a value must be: its declared type and the schema's constraints, for a field and what is inside it. */
    static final class Spec implements Serializable {
        private static final long serialVersionUID = 1L;
        final LogicalType type;
        final boolean nullable; // the schema allows null here ('answer.nullable')
        final Set<String> values; // 'enum', or null
        final int minItems;
        final int maxItems;
        final Spec inner; // an ARRAY's items, a MAP's values
        final Spec[] fields; // a ROW's
        final List<String> names;
        transient ArrayData.ElementGetter items; // an ARRAY's: its elements as the core makes them

        Spec(LogicalType type, JsonNode schema) {
            this.type = type;
            JsonNode s = schema;
            boolean allowsNull = false;
            if (s.has("anyOf")) {
                for (JsonNode option : s.get("anyOf")) {
                    if ("null".equals(option.path("type").asText())) {
                        allowsNull = true;
                    } else {
                        s = option;
                    }
                }
            }
            nullable = allowsNull;
            if (s.has("enum")) {
                values = new java.util.LinkedHashSet<>();
                s.get("enum").forEach(v -> values.add(v.asText()));
            } else {
                values = null;
            }
            minItems = s.path("minItems").asInt(0);
            maxItems = s.path("maxItems").asInt(Integer.MAX_VALUE);
            if (type instanceof ArrayType) {
                inner = new Spec(((ArrayType) type).getElementType(), s.get("items"));
                fields = null;
                names = null;
            } else if (type instanceof MapType) {
                inner = new Spec(((MapType) type).getValueType(), s.get("additionalProperties"));
                fields = null;
                names = null;
            } else if (type instanceof RowType) {
                RowType row = (RowType) type;
                inner = null;
                names = row.getFieldNames();
                fields = new Spec[row.getFieldCount()];
                for (int k = 0; k < fields.length; k++) {
                    fields[k] = new Spec(row.getTypeAt(k), s.get("properties").get(names.get(k)));
                }
            } else {
                inner = null;
                fields = null;
                names = null;
            }
        }
    }

    /** A value that does not keep its spec: what is wrong, and where (the field's path). */
    static final class Mismatch extends Exception {
        private static final long serialVersionUID = 1L;
        final String path;

        Mismatch(String path, String what) {
            super(what, null, false, false);
            this.path = path;
        }
    }

    private final String[] names;
    private final Spec[] specs;
    private final Long maxTokens; // 'request.max-tokens', where the plan sets one

    /** From the plan's "answer": every answer field's name, declared type and schema (read or not by a query). */
    Answers(Plan.Answer answer) {
        List<Plan.AnswerField> fields = answer.fields;
        names = new String[fields.size()];
        specs = new Spec[fields.size()];
        for (int k = 0; k < names.length; k++) {
            names[k] = fields.get(k).name;
            LogicalType type = SqlTypes.dataType(fields.get(k).type).getLogicalType();
            specs[k] = new Spec(type, fields.get(k).schema);
        }
        maxTokens = answer.maxTokens;
    }

    int size() {
        return names.length;
    }

    String name(int k) {
        return names[k];
    }

    /**
     * Checks one answer: {@code flat[k]} the core's value of field k (as the core makes it: text, BIGINT, DOUBLE,
     * BOOLEAN, an array of those, or a nested field's JSON text), with the body's {@code finish_reason},
     * {@code refusal}, {@code completion_tokens} and {@code content_error}. Fills {@code out} with the declared
     * values and returns null, or returns {reason, field} for an error row.
     */
    String[] check(Object[] flat, Object finishReason, Object refusal, Object completionTokens, Object contentError,
            Object[] out) {
        if (finishReason != null && "length".equals(finishReason.toString())) {
            String limit = maxTokens != null ? "max_tokens (" + maxTokens + ")"
                    : "the server's token limit" + (completionTokens == null ? "" : " (" + completionTokens + " tokens)");
            return new String[] {"the answer was cut by " + limit + " before it was whole (finish_reason 'length'): "
                    + "raise 'request.max-tokens', or bound the answer's strings and arrays", "finish_reason"};
        }
        if (refusal != null) {
            return new String[] {"the model refused to answer: " + refusal, "refusal"};
        }
        if (contentError != null) {
            String error = contentError.toString();
            String field = null;
            if (error.startsWith("property '")) {
                int end = error.indexOf('\'', 10);
                field = end > 10 ? error.substring(10, end) : null;
            }
            return new String[] {PREFIX + error, field};
        }
        try {
            for (int k = 0; k < names.length; k++) {
                out[k] = flat[k] == null ? missing(names[k], specs[k]) : top(flat[k], specs[k], names[k]);
            }
        } catch (Mismatch m) {
            return new String[] {PREFIX + "field '" + m.path + "' " + m.getMessage(), m.path};
        }
        return null;
    }

    private static Object missing(String path, Spec spec) throws Mismatch {
        if (!spec.nullable) {
            throw new Mismatch(path, "is missing or null (the model must answer it; 'answer.nullable' lets it "
                    + "answer null)");
        }
        return null;
    }

    /** A top-level field from the core's value. */
    private static Object top(Object v, Spec spec, String path) throws Mismatch {
        switch (spec.type.getTypeRoot()) {
            case ROW:
            case MAP:
                return json(text(v), spec, path);
            case ARRAY: {
                if (v instanceof StringData) { // an array of nested values: its JSON text
                    return json(text(v), spec, path);
                }
                ArrayData array = (ArrayData) v;
                items(array.size(), spec, path);
                Object[] values = new Object[array.size()];
                if (spec.items == null) {
                    spec.items = ArrayData.createElementGetter(coreType(((ArrayType) spec.type).getElementType()));
                }
                for (int i = 0; i < values.length; i++) {
                    Object item = spec.items.getElementOrNull(array, i);
                    values[i] = item == null ? missing(path + "[" + i + "]", spec.inner) : scalar(item, spec.inner, path, i);
                }
                return new GenericArrayData(values);
            }
            case DECIMAL:
                return leaf(v instanceof StringData ? new BigDecimal(v.toString()) : BigDecimal.valueOf((Double) v),
                        spec, path);
            default:
                return scalar(v, spec, path, -1);
        }
    }

    /**
     * A scalar the core made (text, BIGINT, DOUBLE, BOOLEAN), at {@code path} (item {@code i} of it, or -1): text
     * that needs no check but its length is kept as the core's bytes; the rest by {@link #leaf}.
     */
    private static Object scalar(Object v, Spec spec, String path, int i) throws Mismatch {
        LogicalTypeRoot root = spec.type.getTypeRoot();
        if (v instanceof BinaryStringData && root == LogicalTypeRoot.VARCHAR && spec.values == null
                && ((BinaryStringData) v).numChars() <= LogicalTypeChecks.getLength(spec.type)) {
            return v;
        }
        return leaf(plain(v), spec, i < 0 ? path : path + "[" + i + "]");
    }

    /** The type the core makes a value of this declared type as (text for the rest). */
    private static LogicalType coreType(LogicalType declared) {
        switch (declared.getTypeRoot()) {
            case TINYINT:
            case SMALLINT:
            case INTEGER:
            case BIGINT:
                return new org.apache.flink.table.types.logical.BigIntType();
            case FLOAT:
            case DOUBLE:
            case DECIMAL:
                return new org.apache.flink.table.types.logical.DoubleType();
            case BOOLEAN:
                return new org.apache.flink.table.types.logical.BooleanType();
            default:
                return new org.apache.flink.table.types.logical.VarCharType(Integer.MAX_VALUE);
        }
    }

    private static Object plain(Object v) {
        return v instanceof StringData ? v.toString() : v;
    }

    private static String text(Object v) {
        return v.toString();
    }

    private static Object json(String text, Spec spec, String path) throws Mismatch {
        JsonNode node;
        try {
            node = JSON.readTree(text);
        } catch (Exception e) { // the core wrote it: valid JSON
            throw new Mismatch(path, "cannot be read (" + e.getMessage() + ")");
        }
        return node(node, spec, path);
    }

    private static Object node(JsonNode n, Spec spec, String path) throws Mismatch {
        if (n == null || n.isNull() || n.isMissingNode()) {
            return missing(path, spec);
        }
        switch (spec.type.getTypeRoot()) {
            case ROW: {
                if (!n.isObject()) {
                    throw new Mismatch(path, "is " + kind(n) + ", not an object");
                }
                GenericRowData row = new GenericRowData(spec.fields.length);
                for (int k = 0; k < spec.fields.length; k++) {
                    row.setField(k, node(n.get(spec.names.get(k)), spec.fields[k], path + "." + spec.names.get(k)));
                }
                return row;
            }
            case MAP: {
                if (!n.isObject()) {
                    throw new Mismatch(path, "is " + kind(n) + ", not an object");
                }
                Map<Object, Object> map = new LinkedHashMap<>();
                LogicalType key = ((MapType) spec.type).getKeyType();
                for (Iterator<Map.Entry<String, JsonNode>> it = n.fields(); it.hasNext(); ) {
                    Map.Entry<String, JsonNode> e = it.next();
                    String at = path + "['" + e.getKey() + "']";
                    int length = LogicalTypeChecks.getLength(key);
                    if (e.getKey().codePointCount(0, e.getKey().length()) > length) {
                        throw new Mismatch(at, "has a key longer than " + key.asSummaryString() + " holds");
                    }
                    map.put(StringData.fromString(e.getKey()), node(e.getValue(), spec.inner, at));
                }
                return new GenericMapData(map);
            }
            case ARRAY: {
                if (!n.isArray()) {
                    throw new Mismatch(path, "is " + kind(n) + ", not an array");
                }
                items(n.size(), spec, path);
                Object[] values = new Object[n.size()];
                for (int i = 0; i < values.length; i++) {
                    values[i] = node(n.get(i), spec.inner, path + "[" + i + "]");
                }
                return new GenericArrayData(values);
            }
            default:
                Object v;
                if (n.isTextual()) {
                    v = n.asText();
                } else if (n.isBoolean()) {
                    v = n.booleanValue();
                } else if (n.isIntegralNumber()) {
                    v = n.bigIntegerValue();
                } else if (n.isNumber()) {
                    v = n.decimalValue();
                } else {
                    throw new Mismatch(path, "is " + kind(n) + ", not " + expected(spec.type));
                }
                return leaf(v, spec, path);
        }
    }

    private static void items(int size, Spec spec, String path) throws Mismatch {
        if (size < spec.minItems || size > spec.maxItems) {
            throw new Mismatch(path, "has " + size + " items, not " + (spec.maxItems == Integer.MAX_VALUE
                    ? "at least " + spec.minItems : spec.minItems + " to " + spec.maxItems)
                    + " ('answer." + path + ".min-items' / '.max-items')");
        }
    }

    /** A scalar: String, Boolean, Long or BigInteger, Double or BigDecimal, held to its declared type. */
    private static Object leaf(Object v, Spec spec, String path) throws Mismatch {
        LogicalType type = spec.type;
        switch (type.getTypeRoot()) {
            case BOOLEAN:
                if (v instanceof Boolean) {
                    return v;
                }
                break;
            case TINYINT:
            case SMALLINT:
            case INTEGER:
            case BIGINT: {
                BigInteger i = v instanceof Long ? BigInteger.valueOf((Long) v)
                        : v instanceof BigInteger ? (BigInteger) v : null;
                if (i == null) {
                    break;
                }
                int bits = type.getTypeRoot() == org.apache.flink.table.types.logical.LogicalTypeRoot.TINYINT ? 8
                        : type.getTypeRoot() == org.apache.flink.table.types.logical.LogicalTypeRoot.SMALLINT ? 16
                        : type.getTypeRoot() == org.apache.flink.table.types.logical.LogicalTypeRoot.INTEGER ? 32 : 64;
                if (i.bitLength() >= bits) {
                    throw new Mismatch(path, "is " + i + ", out of " + type.asSummaryString() + "'s range");
                }
                long l = i.longValue();
                switch (bits) {
                    case 8:
                        return (byte) l;
                    case 16:
                        return (short) l;
                    case 32:
                        return (int) l;
                    default:
                        return l;
                }
            }
            case FLOAT:
            case DOUBLE: {
                double d;
                if (v instanceof Double) {
                    d = (Double) v;
                } else if (v instanceof Number && !(v instanceof Boolean)) {
                    d = ((Number) v).doubleValue();
                } else {
                    break;
                }
                if (type.getTypeRoot() == org.apache.flink.table.types.logical.LogicalTypeRoot.FLOAT) {
                    if (Float.isInfinite((float) d)) {
                        throw new Mismatch(path, "is " + v + ", out of FLOAT's range");
                    }
                    return (float) d;
                }
                return d;
            }
            case DECIMAL: {
                BigDecimal d = v instanceof BigDecimal ? (BigDecimal) v
                        : v instanceof BigInteger ? new BigDecimal((BigInteger) v)
                        : v instanceof Double ? BigDecimal.valueOf((Double) v)
                        : v instanceof Long ? BigDecimal.valueOf((Long) v) : null;
                if (d == null) {
                    break;
                }
                DecimalType t = (DecimalType) type;
                DecimalData data = DecimalData.fromBigDecimal(d.setScale(t.getScale(), RoundingMode.HALF_UP),
                        t.getPrecision(), t.getScale());
                if (data == null) {
                    throw new Mismatch(path, "is " + d.toPlainString() + ", out of " + type.asSummaryString()
                            + "'s range");
                }
                return data;
            }
            case CHAR:
            case VARCHAR: {
                if (!(v instanceof String)) {
                    break;
                }
                String s = (String) v;
                int length = LogicalTypeChecks.getLength(type);
                if (s.codePointCount(0, s.length()) > length) {
                    throw new Mismatch(path, "is " + s.codePointCount(0, s.length()) + " characters long, longer than "
                            + type.asSummaryString() + " holds" + (s.indexOf('\uFFFD') >= 0
                            ? " (it holds U+FFFD: the server wrote bytes that are not UTF-8 and its decoder replaced "
                                    + "them)" : ""));
                }
                if (spec.values != null && !spec.values.contains(s)) {
                    throw new Mismatch(path, "is '" + s + "', not one of its values " + spec.values);
                }
                if (type.getTypeRoot() == org.apache.flink.table.types.logical.LogicalTypeRoot.CHAR) {
                    s = s + " ".repeat(length - s.codePointCount(0, s.length())); // CHAR(n) is padded, as CAST does
                }
                return StringData.fromString(s);
            }
            case DATE:
            case TIME_WITHOUT_TIME_ZONE:
            case TIMESTAMP_WITHOUT_TIME_ZONE:
            case TIMESTAMP_WITH_LOCAL_TIME_ZONE:
                if (v instanceof String) {
                    return time((String) v, type, path);
                }
                break;
            default:
                break;
        }
        throw new Mismatch(path, "is " + describe(v) + ", not " + expected(type));
    }

    private static Object time(String s, LogicalType type, String path) throws Mismatch {
        try {
            switch (type.getTypeRoot()) {
                case DATE:
                    if (s.length() != 10) {
                        break;
                    }
                    return (int) LocalDate.parse(s).toEpochDay();
                case TIME_WITHOUT_TIME_ZONE: {
                    LocalTime t = LocalTime.parse(s);
                    if (fraction(s) > ((TimeType) type).getPrecision() || s.length() < 8) {
                        break;
                    }
                    return (int) (t.toNanoOfDay() / 1_000_000);
                }
                case TIMESTAMP_WITHOUT_TIME_ZONE: {
                    // (LocalDateTime.parse takes a time without seconds, which the schema's pattern does not)
                    if (s.indexOf('T') != 10 || s.length() < 19
                            || fraction(s) > ((TimestampType) type).getPrecision()) {
                        break;
                    }
                    return TimestampData.fromLocalDateTime(LocalDateTime.parse(s));
                }
                default: {
                    if (!s.endsWith("Z") || s.indexOf('T') != 10 || s.length() < 20
                            || fraction(s.substring(0, s.length() - 1)) > ((LocalZonedTimestampType) type).getPrecision()) {
                        break;
                    }
                    return TimestampData.fromInstant(Instant.parse(s));
                }
            }
        } catch (DateTimeParseException e) {
            // below
        }
        throw new Mismatch(path, "is '" + s + "', not " + expected(type));
    }

    private static int fraction(String s) {
        int dot = s.lastIndexOf('.');
        return dot < 0 ? 0 : s.length() - dot - 1;
    }

    private static String expected(LogicalType type) {
        switch (type.getTypeRoot()) {
            case DATE:
                return "a date as YYYY-MM-DD";
            case TIME_WITHOUT_TIME_ZONE:
                return "a time as HH:MM:SS (" + type.asSummaryString() + ")";
            case TIMESTAMP_WITHOUT_TIME_ZONE:
                return "a timestamp as YYYY-MM-DDTHH:MM:SS (" + type.asSummaryString() + ")";
            case TIMESTAMP_WITH_LOCAL_TIME_ZONE:
                return "a UTC timestamp as YYYY-MM-DDTHH:MM:SSZ (" + type.asSummaryString() + ")";
            case BOOLEAN:
                return "a boolean";
            case CHAR:
            case VARCHAR:
                return "a string";
            case TINYINT:
            case SMALLINT:
            case INTEGER:
            case BIGINT:
                return "an integer";
            default:
                return "a number";
        }
    }

    private static String kind(JsonNode n) {
        return n.isObject() ? "an object" : n.isArray() ? "an array" : n.isTextual() ? "a string"
                : n.isBoolean() ? "a boolean" : n.isNumber() ? "a number" : "null";
    }

    private static String describe(Object v) {
        if (v instanceof String) {
            String s = (String) v;
            return "'" + (s.length() > 40 ? s.substring(0, 40) + "..." : s) + "'";
        }
        if (v instanceof BigDecimal) {
            return ((BigDecimal) v).toPlainString();
        }
        return String.valueOf(v);
    }
}
