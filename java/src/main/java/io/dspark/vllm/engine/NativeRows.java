package io.dspark.vllm.engine;

import io.dspark.vllm.parse.ArrowColumn;

import org.apache.flink.table.data.GenericArrayData;
import org.apache.flink.table.data.TimestampData;
import org.apache.flink.table.data.binary.BinaryStringData;
import org.apache.flink.table.types.logical.ArrayType;
import org.apache.flink.table.types.logical.LogicalType;

/** The native core's values as Flink's internal ones (RowData fields), by the Flink type they are written as. */
final class NativeRows {

    private NativeRows() {}

    /** Value {@code i} of {@code column} (not NULL there) as {@code type} (INT and FLOAT narrowed as Java does). */
    static Object value(ArrowColumn column, int i, LogicalType type) {
        switch (type.getTypeRoot()) {
            case CHAR:
            case VARCHAR:
                return BinaryStringData.fromBytes(column.bytes(), column.textAt(i), column.textLength(i));
            case BIGINT:
                return column.getLong(i);
            case INTEGER:
                return (int) column.getLong(i);
            case DOUBLE:
                return column.getDouble(i);
            case FLOAT:
                return (float) column.getDouble(i);
            case BOOLEAN:
                return column.getBoolean(i);
            case TIMESTAMP_WITHOUT_TIME_ZONE:
                return TimestampData.fromEpochMillis(column.getLong(i));
            case ARRAY: {
                LogicalType element = ((ArrayType) type).getElementType();
                ArrowColumn items = column.child;
                int start = column.start(i);
                Object[] values = new Object[column.end(i) - start];
                for (int j = 0; j < values.length; j++) {
                    values[j] = items.isNull(start + j) ? null : value(items, start + j, element);
                }
                return new GenericArrayData(values);
            }
            default:
                throw new IllegalArgumentException("the native core makes no " + type + " column");
        }
    }
}
