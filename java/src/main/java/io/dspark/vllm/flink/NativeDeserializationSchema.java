package io.dspark.vllm.flink;

import io.dspark.vllm.request.PlanContract;
import io.dspark.vllm.parse.ArrowColumn;
import io.dspark.vllm.parse.NativeCore;
import io.dspark.vllm.parse.NativeParser;

import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.metrics.Counter;
import org.apache.flink.table.data.GenericRowData;
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
 * produced (projected) row type, by name, ROWs of them too; a rejected body gives, by 'on-error', a row of nulls
 * with {@code error_reason}/{@code error_field}, no row, or an IOException that fails the job.
 */
final class NativeDeserializationSchema implements DeserializationSchema<RowData> {

    private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(NativeDeserializationSchema.class);
    static final String ERROR_REASON = "error_reason";
    static final String ERROR_FIELD = "error_field";
    /** parse_batch's reason for what is not a body (ParseOperator gives it for a NULL body too). */
    static final String NOT_A_BODY = "not a body: got NoneType (give bytes or str)";

    private final String document;
    private final RowType produced;
    private final String onError;
    private final TypeInformation<RowData> typeInfo;

    private transient NativeParser parser;
    private transient byte[][] one;
    private transient Counter rejected;
    private transient boolean warned;

    NativeDeserializationSchema(String document, RowType produced, String onError, TypeInformation<RowData> type) {
        this.document = document;
        this.produced = produced;
        this.onError = onError;
        this.typeInfo = type;
    }

    @Override
    public void open(InitializationContext context) throws Exception {
        String problem = NativeCore.available();
        if (problem != null) {
            throw new IllegalStateException("dspark-vllm: " + problem);
        }
        List<String> leaves = new ArrayList<>();
        leaves(produced, leaves);
        parser = new NativeParser(document, leaves);
        one = new byte[1][];
        rejected = context.getMetricGroup().addGroup(PlanContract.GROUP).counter(PlanContract.NUM_RECORDS_IN_ERRORS);
    }

    private static void leaves(RowType row, List<String> out) {
        for (RowType.RowField field : row.getFields()) {
            if (field.getType() instanceof RowType) {
                leaves((RowType) field.getType(), out);
            } else if (!field.getName().equals(ERROR_REASON) && !field.getName().equals(ERROR_FIELD)
                    && !out.contains(field.getName())) {
                out.add(field.getName());
            }
        }
    }

    @Override
    public RowData deserialize(byte[] message) throws IOException {
        one[0] = message;
        Map<String, ArrowColumn> part = parser.parse(one, 0, 1).get(0);
        String reason = part.get(NativeParser.REASON).getString(0);
        if (message == null) { // a record without a value (a Kafka tombstone): as parse_batch and the table say
            reason = NOT_A_BODY;
        }
        if (reason != null) {
            String field = message == null ? null : part.get(NativeParser.FIELD).getString(0);
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
            return row(produced, part, reason, field);
        }
        return row(produced, part, null, null);
    }

    private static GenericRowData row(RowType type, Map<String, ArrowColumn> part, String reason, String field) {
        List<RowType.RowField> fields = type.getFields();
        GenericRowData row = new GenericRowData(fields.size());
        for (int k = 0; k < fields.size(); k++) {
            RowType.RowField f = fields.get(k);
            LogicalType t = f.getType();
            if (t instanceof RowType) {
                row.setField(k, row((RowType) t, part, reason, field));
            } else if (f.getName().equals(ERROR_REASON)) {
                row.setField(k, reason == null ? null : StringData.fromString(reason));
            } else if (f.getName().equals(ERROR_FIELD)) {
                row.setField(k, field == null ? null : StringData.fromString(field));
            } else if (reason == null) {
                ArrowColumn column = part.get(f.getName());
                row.setField(k, column.isNull(0) ? null : NativeRows.value(column, 0, t));
            }
        }
        return row;
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
