package io.dspark.vllm.engine;

import io.dspark.vllm.plan.Plan;

import org.apache.flink.table.api.DataTypes;
import org.apache.flink.table.types.DataType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.utils.LogicalTypeParser;
import org.apache.flink.table.types.utils.TypeConversions;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** Flink SQL types as the plan writes them (their serializable strings), read into Flink's types. */
public final class SqlTypes {
    private SqlTypes() {}

    /** The type a plan writes as {@code sql} (e.g. {@code ROW<`q` STRING>}). */
    public static DataType dataType(String sql) {
        LogicalType logical = LogicalTypeParser.parse(sql, SqlTypes.class.getClassLoader());
        return TypeConversions.fromLogicalToDataType(logical);
    }

    /** The ROW of {@code fields} (name -> Flink SQL type), in order. */
    public static DataType row(Map<String, String> fields) {
        List<DataTypes.Field> list = new ArrayList<>();
        fields.forEach((name, type) -> list.add(DataTypes.FIELD(name, dataType(type))));
        return DataTypes.ROW(list.toArray(new DataTypes.Field[0]));
    }

    /** The columns the native core makes (the plan's {@code native} part) and their types, in its order. */
    public static Map<String, LogicalType> madeTypes(Plan.NativeParse jvm) {
        return madeTypes(jvm.columns, jvm.types);
    }

    /** The columns {@code names} of types {@code types} (Flink SQL), in order. */
    public static Map<String, LogicalType> madeTypes(List<String> names, List<String> types) {
        Map<String, LogicalType> made = new LinkedHashMap<>();
        for (int k = 0; k < names.size(); k++) {
            made.put(names.get(k), dataType(types.get(k)).getLogicalType());
        }
        return made;
    }
}
