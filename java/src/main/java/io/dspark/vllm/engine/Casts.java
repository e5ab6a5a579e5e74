package io.dspark.vllm.engine;

import org.apache.flink.table.data.ArrayData;
import org.apache.flink.table.data.DecimalDataUtils;
import org.apache.flink.table.data.GenericArrayData;
import org.apache.flink.table.data.TimestampData;
import org.apache.flink.table.data.binary.BinaryStringData;
import org.apache.flink.table.data.binary.BinaryStringDataUtil;
import org.apache.flink.table.types.logical.ArrayType;
import org.apache.flink.table.types.logical.DecimalType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.LogicalTypeFamily;
import org.apache.flink.table.types.logical.LogicalTypeRoot;
import org.apache.flink.table.types.logical.VarCharType;
import org.apache.flink.table.types.logical.utils.LogicalTypeChecks;
import org.apache.flink.table.utils.DateTimeUtils;

import java.io.Serializable;
import java.util.TimeZone;

/**
 * Flink SQL's CAST, for the casts a declared column may make of a column the parse step makes (the planner's
 * {@code _TABLE_CASTS}: the ones that cannot fail at run time), on internal values (RowData fields), written
 * with the same runtime functions the code Flink's planner generates for CAST calls (its cast rules, with
 * 'table.exec.legacy-cast-behaviour' off): so the parse step writes every declared column itself and no SQL
 * runs after it. Two differences, deliberate: a TIMESTAMP column (the UTC time of an epoch value) as
 * TIMESTAMP_LTZ is that instant in any session time zone (Flink's CAST reads it as the session's local time,
 * another instant where that zone is not UTC); a TIMESTAMP before 1970 as DATE or TIME is its calendar day and
 * time of day (Flink's generated code gives the day after, and a negative TIME that fails the job where a sink
 * writes it). {@code tests/test_flink_parse.py} holds these to Flink's own CAST over the same values.
 */
final class Casts {

    private Casts() {}

    /** One cast, of a value that is not NULL. */
    interface Cast extends Serializable {
        Object apply(Object value);
    }

    /** The cast of {@code from} values to {@code to}, or null where this is not one of them. */
    static Cast of(LogicalType from, LogicalType to) {
        if (to.is(LogicalTypeFamily.CHARACTER_STRING)) {
            Cast text = toText(from);
            return text == null ? null : fitted(text, to, from.is(LogicalTypeRoot.ARRAY));
        }
        switch (from.getTypeRoot()) {
            case BIGINT:
            case DOUBLE:
                return numeric(to);
            case TIMESTAMP_WITHOUT_TIME_ZONE:
                return timestamp(LogicalTypeChecks.getPrecision(from), to);
            case ARRAY:
                if (!to.is(LogicalTypeRoot.ARRAY)) {
                    return null;
                }
                LogicalType fromElement = ((ArrayType) from).getElementType();
                LogicalType toElement = ((ArrayType) to).getElementType();
                Cast element = of(fromElement, toElement);
                if (element == null) {
                    return null;
                }
                ArrayData.ElementGetter getter = ArrayData.createElementGetter(fromElement);
                return v -> elements((ArrayData) v, getter, element);
            default:
                return null;
        }
    }

    /** A numeric value (Long, Double) to another number as Java's primitive casts do (Flink's generated code). */
    private static Cast numeric(LogicalType to) {
        switch (to.getTypeRoot()) {
            case BIGINT:
                return v -> ((Number) v).longValue();
            case INTEGER:
                return v -> ((Number) v).intValue();
            case SMALLINT:
                return v -> ((Number) v).shortValue();
            case TINYINT:
                return v -> ((Number) v).byteValue();
            case DOUBLE:
                return v -> ((Number) v).doubleValue();
            case FLOAT:
                return v -> ((Number) v).floatValue();
            case DECIMAL: {
                int precision = ((DecimalType) to).getPrecision();
                int scale = ((DecimalType) to).getScale();
                // NULL where the value does not fit, as in Flink; a double that is no number (NaN, infinite)
                // too, where Flink's code would throw.
                return v -> v instanceof Double
                        ? (Double.isFinite((Double) v) ? DecimalDataUtils.castFrom((double) v, precision, scale) : null)
                        : DecimalDataUtils.castFrom((long) v, precision, scale);
            }
            default:
                return null;
        }
    }

    /**
     * TIMESTAMP(p) to another TIMESTAMP, TIMESTAMP_LTZ, DATE or TIME. A profile's TIMESTAMP column is the UTC time
     * of an epoch value (`created`): as TIMESTAMP_LTZ it is that instant in every session time zone.
     */
    private static Cast timestamp(int precision, LogicalType to) {
        switch (to.getTypeRoot()) {
            case TIMESTAMP_WITHOUT_TIME_ZONE:
            case TIMESTAMP_WITH_LOCAL_TIME_ZONE: {
                int target = LogicalTypeChecks.getPrecision(to);
                return v -> precision <= target ? v : DateTimeUtils.truncate((TimestampData) v, target);
            }
            case DATE: // the day it falls in, before 1970 too (Flink's code divides: the day after)
                return v -> (int) Math.floorDiv(((TimestampData) v).getMillisecond(), DateTimeUtils.MILLIS_PER_DAY);
            case TIME_WITHOUT_TIME_ZONE: {
                int target = LogicalTypeChecks.getPrecision(to);
                return v -> {
                    TimestampData t = precision <= target ? (TimestampData) v : DateTimeUtils.truncate((TimestampData) v, target);
                    // The time of day, before 1970 too (Flink's code takes the remainder: a negative TIME,
                    // which fails the job where a sink writes it).
                    return (int) Math.floorMod(t.getMillisecond(), DateTimeUtils.MILLIS_PER_DAY);
                };
            }
            default:
                return null;
        }
    }

    /** A value as Flink's CAST to STRING writes it, as a Java string; null where there is no such cast. */
    private static Cast toText(LogicalType from) {
        switch (from.getTypeRoot()) {
            case CHAR:
            case VARCHAR:
                return v -> v.toString();
            case BIGINT:
            case INTEGER:
            case DOUBLE:
            case FLOAT:
                return v -> "" + v;
            case BOOLEAN:
                return v -> ((Boolean) v ? BinaryStringDataUtil.TRUE_STRING : BinaryStringDataUtil.FALSE_STRING).toString();
            case TIMESTAMP_WITHOUT_TIME_ZONE: {
                int precision = LogicalTypeChecks.getPrecision(from);
                TimeZone utc = TimeZone.getTimeZone("UTC");
                return v -> DateTimeUtils.formatTimestamp((TimestampData) v, utc, precision);
            }
            case ARRAY: {
                LogicalType element = ((ArrayType) from).getElementType();
                Cast text = toText(element);
                if (text == null) {
                    return null;
                }
                ArrayData.ElementGetter getter = ArrayData.createElementGetter(element);
                return v -> {
                    ArrayData array = (ArrayData) v;
                    StringBuilder out = new StringBuilder("[");
                    for (int i = 0; i < array.size(); i++) {
                        out.append(i == 0 ? "" : ", ");
                        Object item = getter.getElementOrNull(array, i);
                        out.append(item == null ? "NULL" : text.apply(item));
                    }
                    return out.append(']').toString();
                };
            }
            default:
                return null;
        }
    }

    /**
     * The text cut to a CHAR(n)/VARCHAR(n)'s length, a CHAR(n)'s padded with spaces, as StringData. Flink cuts
     * an array's text by UTF-16 units and any other by characters: the same here.
     */
    private static Cast fitted(Cast text, LogicalType to, boolean units) {
        int length = LogicalTypeChecks.getLength(to);
        boolean pad = to.is(LogicalTypeRoot.CHAR);
        return v -> {
            String s = (String) text.apply(v);
            if (length < VarCharType.MAX_LENGTH) {
                int chars = units ? s.length() : s.codePointCount(0, s.length());
                if (chars > length) {
                    s = s.substring(0, units ? length : s.offsetByCodePoints(0, length));
                } else if (pad && chars < length) {
                    s = s + " ".repeat(length - chars);
                }
            }
            return BinaryStringData.fromString(s);
        };
    }

    private static ArrayData elements(ArrayData array, ArrayData.ElementGetter getter, Cast element) {
        Object[] out = new Object[array.size()];
        for (int i = 0; i < out.length; i++) {
            Object item = getter.getElementOrNull(array, i);
            out[i] = item == null ? null : element.apply(item);
        }
        return new GenericArrayData(out);
    }
}
