package io.dspark.vllm.engine;

import io.dspark.vllm.plan.Plan;
import io.dspark.vllm.request.RequestSpec;
import io.dspark.vllm.request.Requester;
import io.dspark.vllm.store.StoredRequests;

import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.streaming.api.datastream.AsyncDataStream;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.functions.AsyncPredictFunction;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.RowType;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * The one builder of the runtime: the faces (io.dspark.vllm.sql: the table, the model, the format) make their
 * steps here from the plan's records, and the steps build their parts here when they open on a TaskManager, so
 * that the request step, the response store, the parse batch and the row shape are wired once for all three.
 *
 * <ul>
 *   <li>a table: {@link #requests} (the request step on a DataStream of prompts), {@link #shape} and {@link #parse}
 *       (the parse step to the declared row), {@link #shaped} (the declared row without a parse step);
 *   <li>a model: {@link #predict} (ML_PREDICT's function: the same request step, store, parse batch and shape);
 *   <li>the format: {@link #format} (a body a call, the same core and shape).
 * </ul>
 */
public final class Engine {
    private Engine() {}

    // -- what the faces call, where the query is planned -------------------------------------------------------

    /** The table's request step on {@code prompts} (Flink's async I/O, ordered or not as the plan says). */
    public static SingleOutputStreamOperator<RowData> requests(DataStream<RowData> prompts, Plan.TableRequest request) {
        RequestStep step = new RequestStep(request);
        long timeout = request.timeoutMs;
        int capacity = (int) request.capacity;
        SingleOutputStreamOperator<RowData> out =
                "ordered".equals(request.outputMode)
                        ? AsyncDataStream.orderedWait(prompts, step, timeout, TimeUnit.MILLISECONDS, capacity)
                        : AsyncDataStream.unorderedWait(prompts, step, timeout, TimeUnit.MILLISECONDS, capacity);
        return out.returns(RequestStep.typeInfo()).name("dspark-vllm requests");
    }

    /**
     * The declared row {@code declared} made of {@code input}'s columns and those the parse step makes
     * ({@code made}: name and type; empty without a parse step), by each column's layout; answer fields checked
     * where {@code answer} is not null. Refused in one line where a column has no layout.
     */
    public static RowShape shape(
            RowType declared, List<Plan.Layout> layouts, RowType input, Map<String, LogicalType> made,
            Plan.Answer answer) {
        RowShape shape = RowShape.declared(declared, layouts, input, made, answer);
        if (shape == null) {
            throw new IllegalStateException(
                    "dspark-vllm: a column of " + declared + " has no layout over " + input + "; please report it");
        }
        return shape;
    }

    /** The columns the native core makes for the plan's parse step, and their types. */
    public static Map<String, LogicalType> made(Plan.NativeParse parse) {
        return SqlTypes.madeTypes(parse);
    }

    /**
     * The parse step in the JVM (the native core, in batches) on {@code rows} of {@code input}, to {@code shape};
     * {@code read}: what the core reads for it (the planner's, {@code connector.plan.parse.table_read}).
     */
    public static SingleOutputStreamOperator<RowData> parse(
            DataStream<RowData> rows, RowType input, Plan.NativeParse parse, Plan.NativeRead read, RowShape shape) {
        ParseOperator step = new ParseOperator(
                batch(parse, read, shape, input), input, parse.batchSize.intValue(), parse.batchMs);
        return rows.transform("dspark-vllm parse (native core)", InternalTypeInfo.of(shape.type()), step);
    }

    /** The declared row of each row by {@code shape}, no parse step (metadata only, or the Python parse step's). */
    public static SingleOutputStreamOperator<RowData> shaped(DataStream<RowData> rows, RowShape shape) {
        return rows.map(new ShapedRows(shape)).returns(InternalTypeInfo.of(shape.type())).name("dspark-vllm row");
    }

    /**
     * ML_PREDICT's function for a model's plan ({@code planJson}, read and checked here, where the query is
     * planned), its INPUT and OUTPUT row types and the operator's timeout.
     */
    public static AsyncPredictFunction predict(String planJson, String inputType, String outputType, long timeoutMs) {
        return new ModelPredictFunction(planJson, inputType, outputType, timeoutMs);
    }

    /** The deadline a model's requests keep under ML_PREDICT's {@code timeoutMs}; refuses one too short for any. */
    public static double predictDeadlineS(long timeoutMs) {
        return ModelPredictFunction.deadlineS(timeoutMs);
    }

    /**
     * The format's decoder of one body a call, to {@code produced} (the projected physical row); {@code read}: what
     * the core reads for it (the planner's, {@code connector.plan.parse.format_read}).
     */
    public static DeserializationSchema<RowData> format(
            Plan.Format plan, Plan.NativeRead read, RowType produced, TypeInformation<RowData> type) {
        return new NativeDeserializationSchema(
                read, SqlTypes.madeTypes(plan.columns, plan.types), plan.physical, produced, plan.onError, type,
                plan.answer);
    }

    // -- what the steps call, on a TaskManager ------------------------------------------------------------------

    /**
     * The parse batch of the plan's parse step over rows of {@code input}: the body, the replayed line and the
     * request's error found by name in it ({@code RequestStep.COLUMNS}, {@code FileLines.BODIES}).
     */
    static ParseBatch batch(Plan.NativeParse parse, Plan.NativeRead read, RowShape shape, RowType input) {
        if (read == null) {
            throw new IllegalArgumentException("dspark-vllm: the plan says not what the native core reads; install "
                    + "the same dspark-vllm on the client and the TaskManagers");
        }
        List<String> names = input.getFieldNames();
        return new ParseBatch(read, shape, names.indexOf("_body"), names.indexOf("_source_line"),
                names.indexOf("_request_error"), Boolean.TRUE.equals(parse.requireCreated), parse.gpuUnused);
    }

    /** Refuses the plan's request columns unless they are the row this jar's request step makes. */
    public static void checkRequestColumns(List<Plan.NameType> planned) {
        List<String> names = new ArrayList<>();
        List<String> types = new ArrayList<>();
        planned.forEach(pair -> {
            names.add(pair.name);
            types.add(pair.type);
        });
        if (!names.equals(RequestStep.COLUMNS) || !types.equals(RequestStep.TYPES)) {
            throw new IllegalArgumentException(
                    "dspark-vllm: the plan's request columns " + names + " " + types + " are not this jar's "
                            + RequestStep.COLUMNS + " " + RequestStep.TYPES
                            + ": install the same dspark-vllm on the client and the TaskManagers");
        }
    }

    /**
     * The requests of one subtask, sent by a {@link Requester} of {@code spec} through the plan's store
     * ('request.store', 'request.cache'; none when {@code store} is null). {@code restored}: a Kafka store's
     * positions from the checkpoint (the table's request step keeps them; ML_PREDICT's function has no
     * checkpoint hook), or null. {@code subtasks}: the operator's parallelism, the requesters that send to the
     * same replicas.
     */
    static StoredRequests storedRequests(RequestSpec spec, Plan.Store store, int subtask, int subtasks,
            Map<Integer, Long> restored) {
        return new StoredRequests(new Requester(spec, subtasks), store == null ? null : store.uri,
                store == null ? 0 : store.cacheTtlMs, subtask, restored);
    }
}
