package io.dspark.vllm.engine;

import org.apache.flink.table.types.logical.BigIntType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.RowType;
import org.apache.flink.table.types.logical.VarCharType;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** Rows the tests' parse steps make: a body's id and the step's own columns, as a table declares them. */
final class Shapes {
    private Shapes() {}

    /** {@code id}, {@code _line}, {@code _error}, {@code _error_field}, {@code _backend} of the bodies of {@code input}. */
    static RowShape idAndInternal(RowType input) {
        LogicalType text = new VarCharType(VarCharType.MAX_LENGTH);
        String[] names = {"id", "_line", "_error", "_error_field", "_backend"};
        RowType out = RowType.of(new LogicalType[] {text, new BigIntType(), text, text, text}, names);
        List<io.dspark.vllm.plan.Plan.Layout> layouts = new ArrayList<>();
        for (String name : names) {
            layouts.add(new io.dspark.vllm.plan.Plan.Layout(name, null, null, null));
        }
        return RowShape.declared(out, layouts, input, Map.of("id", text));
    }
}
