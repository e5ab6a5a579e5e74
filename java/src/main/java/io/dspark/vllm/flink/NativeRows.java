package io.dspark.vllm.flink;

import io.dspark.vllm.parse.ArrowColumn;

import org.apache.flink.table.data.GenericArrayData;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.TimestampData;
import org.apache.flink.table.data.binary.BinaryStringData;
import org.apache.flink.table.types.logical.ArrayType;
import org.apache.flink.table.types.logical.LogicalType;

import java.io.Serializable;
import java.util.List;
import java.util.Map;

/** The native core's columns as Flink's internal values (RowData fields), by the Flink type of each column. */
final class NativeRows implements Serializable {

    private final String[] names;
    private final LogicalType[] types;

    NativeRows(List<String> names, List<LogicalType> types) {
        this.names = names.toArray(new String[0]);
        this.types = types.toArray(new LogicalType[0]);
    }

    int size() {
        return names.length;
    }

    /** Row {@code i} of {@code part} into {@code row}'s fields {@code at, at + 1, ...} (nulls for an error row). */
    void fill(Map<String, ArrowColumn> part, int i, GenericRowData row, int at) {
        for (int k = 0; k < names.length; k++) {
            ArrowColumn column = part.get(names[k]);
            row.setField(at + k, column.isNull(i) ? null : value(column, i, types[k]));
        }
    }

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
            case TIMESTAMP_WITH_LOCAL_TIME_ZONE:
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
