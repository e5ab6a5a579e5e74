package io.dspark.vllm.engine;

import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.table.data.RowData;

/**
 * The declared row of each input row by a {@link RowShape} of its columns only: the source's or request step's
 * row (no parse step), or the Python parse step's flat row.
 */
public final class ShapedRows implements MapFunction<RowData, RowData> {
    private static final long serialVersionUID = 1L;
    private final RowShape shape;
    private transient RowShape.Body body;

    public ShapedRows(RowShape shape) {
        if (shape == null) {
            throw new IllegalStateException(
                    "dspark-vllm: a column has no layout over the row it is made of; please report it");
        }
        this.shape = shape;
    }

    @Override
    public RowData map(RowData row) {
        if (body == null) {
            body = new RowShape.Body();
        }
        body.in = row;
        body.reason = null;
        body.field = null;
        shape.check(body);
        return shape.row(body);
    }
}
