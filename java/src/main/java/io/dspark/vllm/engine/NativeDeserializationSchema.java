package io.dspark.vllm.engine;

import io.dspark.vllm.plan.Plan;
import io.dspark.vllm.plan.PlanContract;
import io.dspark.vllm.parse.ArrowColumn;
import io.dspark.vllm.parse.NativeCore;
import io.dspark.vllm.parse.NativeParser;

import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.metrics.Counter;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.RowType;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * One body in, one row out ({@code 'format' = 'dspark-vllm'}): the native core reads the columns of the
 * produced (projected) row type, by name, ROWs of them too, and the row is made as a table's parse step makes
 * it ({@link RowShape}, casts included); a rejected body gives, by 'on-error', a row of nulls with
 * {@code error_reason}/{@code error_field}, no row, or an IOException that fails the job.
 */
public final class NativeDeserializationSchema implements DeserializationSchema<RowData> {

    private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(NativeDeserializationSchema.class);
    /** parse_batch's reason for what is not a body (ParseOperator gives it for a NULL body too). */
    static final String NOT_A_BODY = "not a body: got NoneType (give bytes or str)";

    private final Plan.NativeRead read; // what the core reads (the planner's, for the projected row)
    private final RowShape shape;
    private final String onError;
    private final TypeInformation<RowData> typeInfo;

    private transient NativeParser parser;
    private transient byte[][] one;
    private transient RowShape.Body body;
    private transient Counter rejected;
    private transient boolean warned;

    /**
     * {@code made}: the columns the core makes and their types; {@code physical}: each declared column's layout
     * (the format plan's: the planner decides what a column is made of, here only the projected ones are taken).
     */
    NativeDeserializationSchema(
            Plan.NativeRead read, Map<String, LogicalType> made, Map<String, Plan.Physical> physical,
            RowType produced, String onError, TypeInformation<RowData> type, Plan.Answer answer) {
        this.read = read;
        // The row as a table's parse step makes it (the same layouts and casts).
        List<Plan.Layout> layouts = new ArrayList<>();
        for (String name : produced.getFieldNames()) {
            Plan.Physical column = physical.get(name);
            if (column == null) {
                throw new IllegalArgumentException("dspark-vllm: the format's plan has no column '" + name
                        + "': install the same dspark-vllm on the client and the TaskManagers");
            }
            layouts.add(column.from);
        }
        this.shape = Engine.shape(produced, layouts, RowType.of(), made, answer);
        new NativeParser(read).require(shape.coreColumns());
        this.onError = onError;
        this.typeInfo = type;
    }

    @Override
    public void open(InitializationContext context) throws Exception {
        String problem = NativeCore.available();
        if (problem != null) {
            throw new IllegalStateException("dspark-vllm: " + problem);
        }
        parser = new NativeParser(read);
        one = new byte[1][];
        body = new RowShape.Body();
        rejected = context.getMetricGroup().addGroup(PlanContract.GROUP).counter(PlanContract.NUM_RECORDS_IN_ERRORS);
    }

    @Override
    public RowData deserialize(byte[] message) throws IOException {
        one[0] = message;
        Map<String, ArrowColumn> part = parser.parse(one, 0, 1).get(0);
        String reason = part.get(NativeParser.REASON).getString(0);
        if (message == null) { // a record without a value (a Kafka tombstone): as parse_batch and the table say
            reason = NOT_A_BODY;
        }
        String field = reason == null || message == null ? null : part.get(NativeParser.FIELD).getString(0);
        body.columns = reason == null ? shape.bind(part) : null;
        body.i = 0;
        body.reason = reason == null ? null : StringData.fromString(reason);
        body.field = field == null ? null : StringData.fromString(field);
        if (shape.check(body) && reason == null) { // an answer that does not keep its schema
            reason = body.reason.toString();
            field = body.field == null ? null : body.field.toString();
        }
        if (reason != null) {
            rejected.inc();
            if ("fail".equals(onError)) {
                throw new IOException("dspark-vllm format: a rejected body ('dspark-vllm.on-error' = 'fail'): "
                        + (field == null ? "" : field + ": ") + reason);
            }
            if ("skip".equals(onError)) {
                if (!warned) {
                    warned = true;
                    LOG.warn("dspark-vllm format: rejected bodies are skipped ('dspark-vllm.on-error' = 'skip') and "
                            + "counted in numRecordsInErrors; the first: {}{}", field == null ? "" : field + ": ", reason);
                }
                return null;
            }
        }
        return shape.generic(body);
    }

    @Override
    public boolean isEndOfStream(RowData nextElement) {
        return false;
    }

    @Override
    public TypeInformation<RowData> getProducedType() {
        return typeInfo;
    }
}
