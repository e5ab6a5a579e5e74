package io.dspark.vllm.engine;

import io.dspark.vllm.plan.Plan;
import io.dspark.vllm.plan.PlanReader;
import io.dspark.vllm.request.Outcome;
import io.dspark.vllm.request.RequestSpec;
import io.dspark.vllm.request.Requester;
import io.dspark.vllm.store.StoredRequests;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.flink.table.data.ArrayData;
import org.apache.flink.table.data.DecimalData;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.data.binary.BinaryRowData;
import org.apache.flink.table.functions.AsyncPredictFunction;
import org.apache.flink.table.functions.FunctionContext;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.RowType;

import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

/**
 * {@code ML_PREDICT} with a 'dspark-vllm' model: one input row (the model's INPUT columns) in, one row of its
 * OUTPUT columns out, through the table's request step ({@link Requester}) and parse step ({@link ParseBatch}).
 * Flink runs it in its async operator ({@code AsyncWaitOperator}): the rows in flight are in its checkpoint state.
 *
 * <p>The request of a row: the plan's request body (model, options, response_format, as the table sends them)
 * with the row's messages (the template over the INPUT columns, the system prompt, or a messages column) and the
 * row's own body options (INPUT columns named like them, not used by the template, each held to its option's
 * rule). The responses are parsed by a thread of the function's
 * own, a batch at a time ({@link Completions}): what completed while the previous batch was parsed, up to the
 * plan's {@code batch_size}, goes in one call of the native core, with no wait for more. Every row gives exactly
 * one output row: a failed request, a row that cannot be made a request or a rejected body is a row with
 * {@code error.reason} set (with {@code 'request.on-failure' = 'fail-job'} a request that failed for good fails
 * the job; a row that cannot be made a request never does).
 *
 * <p>Public: Flink's generated code calls it from another class loader.
 */
public final class ModelPredictFunction extends AsyncPredictFunction {
    private static final long serialVersionUID = 1L;
    private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(ModelPredictFunction.class);
    private static final ObjectMapper JSON = new ObjectMapper();
    // A request ends before ML_PREDICT's timeout, which would fail the job: at 4/5 of it, at most this long before.
    private static final long TIMEOUT_MARGIN_MS = 5_000;
    // The shortest timeout that leaves a request a deadline worth sending it for (1.6 s).
    static final long MIN_TIMEOUT_MS = 2_000;

    private final String planJson;
    private final String inputType;
    private final String outputType;
    private final long operatorTimeoutMs;

    private transient StoredRequests requests;
    private transient byte[] modelIdentity;
    private transient RowIdentity rowIdentity;
    private transient RequestMetrics metrics;
    private transient ParseBatch parse;
    private transient Prompt prompt;
    private transient boolean failJob;
    private transient Completions<Done> done;
    private transient boolean said;
    private transient RowData.FieldGetter routingKeyColumn; // 'request.routing.key-column', or null
    private transient boolean asked;
    private transient String inputKey;
    private transient Input input;
    private transient Thread inputCheck;

    /** How long a model waits for its first row before it says that its input has none yet. */
    static final long NO_INPUT_NOTE_MS = 10_000;
    // The model's instances in this JVM (every subtask of a local job; a TaskManager's on a cluster), by operator
    // and plan: whether any of them was given a row. A source with no records (an empty Kafka topic) says nothing,
    // and a job that asks nothing looked like a job that hangs: the model says it, once for all its instances.
    private static final Map<String, Input> INPUTS = new java.util.concurrent.ConcurrentHashMap<>();

    /** What the instances of one model in this JVM have been given. */
    static final class Input {
        final java.util.concurrent.atomic.AtomicBoolean rows = new java.util.concurrent.atomic.AtomicBoolean();
        final java.util.concurrent.atomic.AtomicBoolean said = new java.util.concurrent.atomic.AtomicBoolean();
        int open;

        /** Said once (stderr: the console of a local job, a TaskManager's .out file; and the log), if no row came. */
        void sayIfNone(String line) {
            if (!rows.get() && said.compareAndSet(false, true)) {
                System.err.println(line);
                LOG.info(line);
            }
        }
    }

    static String waitingLine(String model, long ms) {
        return "dspark-vllm: model " + model + " (ML_PREDICT) has had no row to ask for " + ms / 1000
                + " s: the job is waiting for its input's records (an empty Kafka topic?) and asks as they come";
    }

    static String noneLine(String model) {
        return "dspark-vllm: model " + model + " (ML_PREDICT) asked nothing: its input ended with no row "
                + "(an empty topic or file?)";
    }

    ModelPredictFunction(String planJson, String inputType, String outputType, long operatorTimeoutMs) {
        try {
            RequestSpec.of(PlanReader.readModel(JSON.readTree(planJson)).request.client); // refused here, planned
        } catch (java.io.IOException e) {
            throw new IllegalArgumentException("dspark-vllm: the model's plan is not JSON: " + e.getMessage(), e);
        }
        this.planJson = planJson;
        this.inputType = inputType;
        this.outputType = outputType;
        this.operatorTimeoutMs = operatorTimeoutMs;
    }

    /** A request that ended, waiting for the parse thread. */
    private static final class Done {
        final String prompt;
        final String id;
        final Outcome outcome;
        final boolean cached;
        final CompletableFuture<Collection<RowData>> result;

        Done(String prompt, String id, Outcome outcome, boolean cached, CompletableFuture<Collection<RowData>> result) {
            this.prompt = prompt;
            this.id = id;
            this.outcome = outcome;
            this.cached = cached;
            this.result = result;
        }
    }

    /**
     * The deadline of every request of a model run under ML_PREDICT's {@code timeoutMs}: 4/5 of it, at most 5 s
     * before it (time for the parse step and the operator), so that no row passes the timeout, which fails the job.
     * A timeout that leaves no sound deadline is refused when the query is planned
     * (by the model's provider): every request would be sent, paid for, and its answer thrown away.
     */
    static double deadlineS(long timeoutMs) {
        if (timeoutMs < MIN_TIMEOUT_MS) {
            throw new org.apache.flink.table.api.ValidationException("dspark-vllm: ML_PREDICT's 'timeout' of "
                    + Requester.seconds(timeoutMs / 1000.0) + " s is too short for a request to the model: set "
                    + "MAP['timeout', '" + MIN_TIMEOUT_MS / 1000 + " s'] or more in ML_PREDICT (or "
                    + "'table.exec.async-ml-predict.timeout'; the model ends each request at 4/5 of it, at most "
                    + TIMEOUT_MARGIN_MS / 1000 + " s before it)");
        }
        return (timeoutMs - Math.min(TIMEOUT_MARGIN_MS, timeoutMs / 5.0)) / 1000.0;
    }

    @Override
    public void open(FunctionContext context) throws Exception {
        Plan.Model plan = PlanReader.readModel(JSON.readTree(planJson));
        Plan.ModelRequest request = plan.request;
        RequestSpec spec = RequestSpec.of(request.client);
        double deadlineS = deadlineS(operatorTimeoutMs);
        if (spec.deadlineS > deadlineS) {
            LOG.info("dspark-vllm: model requests end within ML_PREDICT's timeout of {} s: 'request.retry.deadline' "
                    + "is {} s here (set ML_PREDICT's 'timeout' higher for a longer one)",
                    Requester.seconds(operatorTimeoutMs / 1000.0), Requester.seconds(deadlineS));
            spec = spec.within(deadlineS);
        }
        failJob = "fail-job".equals(request.onFailure);
        prompt = new Prompt(plan, spec, (RowType) SqlTypes.dataType(inputType).getLogicalType());

        // The row the request step makes (contract.REQUEST_COLUMNS) is the parse step's input, as in a table.
        Engine.checkRequestColumns(request.columns);
        RowType requestRow = RequestStep.ROW;
        RowType out = (RowType) SqlTypes.dataType(outputType).getLogicalType();
        List<Plan.Layout> layouts = new ArrayList<>();
        plan.outputs.forEach(o -> layouts.add(o.from));
        Plan.NativeParse jvm = plan.nativeValue;
        parse = Engine.batch(
                jvm, jvm.read, Engine.shape(out, layouts, requestRow, Engine.made(jvm), plan.answer), requestRow);
        parse.open(context.getMetricGroup(), context.getTaskInfo().getIndexOfThisSubtask() == 0,
                ParseBatch.gpuHere(context.getExternalResourceInfos(ParseBatch.GPU_RESOURCE)));

        routingKeyColumn = request.routingKey == null ? null : RowData.createFieldGetter(
                ((RowType) SqlTypes.dataType(inputType).getLogicalType()).getTypeAt(request.routingKey.intValue()),
                request.routingKey.intValue());
        requests = Engine.storedRequests(spec, request.store, context.getTaskInfo().getIndexOfThisSubtask(),
                context.getTaskInfo().getNumberOfParallelSubtasks(), null);
        // The request key of a row: the model's name, the endpoint and body (StoredRequests) and the whole INPUT row.
        modelIdentity = plan.model.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        rowIdentity = new RowIdentity((RowType) SqlTypes.dataType(inputType).getLogicalType());
        metrics = new RequestMetrics(context.getMetricGroup(), requests, false); // the parse step counts the bytes
        if (context.getTaskInfo().getIndexOfThisSubtask() == 0) {
            RequestStep.checkEndpoint(spec.url); // an endpoint that takes no connection: said at once, as a table's
        }
        done = new Completions<>("dspark-vllm model parse " + plan.model,
                jvm.batchSize.intValue(), this::parse);

        String model = plan.model;
        inputKey = context.getTaskInfo().getTaskName() + "\u0000" + planJson.hashCode();
        input = INPUTS.compute(inputKey, (k, v) -> {
            Input in = v == null ? new Input() : v;
            in.open++;
            return in;
        });
        Input shared = input;
        inputCheck = new Thread(() -> {
            try {
                Thread.sleep(NO_INPUT_NOTE_MS);
            } catch (InterruptedException e) {
                return;
            }
            shared.sayIfNone(waitingLine(model, NO_INPUT_NOTE_MS));
        }, "dspark-vllm model input check");
        inputCheck.setDaemon(true);
        inputCheck.start();
    }

    @Override
    public CompletableFuture<Collection<RowData>> asyncPredict(RowData input) {
        if (!said) { // which of Flink's operators calls the model: said once, for whoever runs the job
            said = true;
            for (StackTraceElement frame : Thread.currentThread().getStackTrace()) {
                if (frame.getClassName().endsWith("Operator")) {
                    LOG.info("dspark-vllm: ML_PREDICT runs the model in {}", frame.getClassName());
                    break;
                }
            }
        }
        if (!asked) {
            asked = true;
            this.input.rows.set(true);
        }
        CompletableFuture<Collection<RowData>> result = new CompletableFuture<>();
        metrics.sent();
        Prompt.Request r = prompt.of(input);
        CompletableFuture<StoredRequests.Answer> sent;
        if (r.problem != null) {
            sent = CompletableFuture.completedFuture(new StoredRequests.Answer(Requester.notSent(r.problem), null, false));
        } else {
            byte[] identity;
            try {
                identity = rowIdentity.of(modelIdentity, input);
            } catch (Exception e) { // a row we cannot key is sent as without a store: never a lost row
                identity = null;
            }
            byte[] routingKey = routingKey(input);
            sent = identity == null
                    ? requests.requester().sendBody(r.body, java.util.UUID.randomUUID().toString(), routingKey)
                            .thenApply(o -> new StoredRequests.Answer(o, null, false))
                    : requests.sendBody(r.body, null, identity, routingKey);
        }
        sent.whenComplete((answer, bug) -> {
            if (bug != null) { // the requester never fails a future; a defect of ours costs this row only
                answer = new StoredRequests.Answer(Requester.notSent("internal error (" + bug + ")"), null, false);
            }
            done.add(new Done(r.text, answer.key, answer.outcome, answer.cached, result));
        });
        return result;
    }

    /**
     * The row's routing key ('request.routing.key-column'): the column's value as text, a BYTES value's own bytes;
     * null where the option is unset or the value is NULL (the request goes by its body's head).
     */
    private byte[] routingKey(RowData input) {
        Object v = routingKeyColumn == null ? null : routingKeyColumn.getFieldOrNull(input);
        if (v == null) {
            return null;
        }
        return v instanceof byte[] ? (byte[]) v : v.toString().getBytes(java.nio.charset.StandardCharsets.UTF_8);
    }

    /** On the parse thread: the responses of one batch, parsed in one call, each row's future completed once. */
    private void parse(List<Done> batch) {
        List<RowData> rows = new ArrayList<>(batch.size());
        List<CompletableFuture<Collection<RowData>>> futures = new ArrayList<>(batch.size());
        for (Done d : batch) {
            metrics.ended(d.outcome);
            if (failJob && d.outcome.failedForGood()) {
                d.result.completeExceptionally(RequestStep.failedForGood(d.id, d.outcome));
                continue;
            }
            Outcome o = d.outcome;
            rows.add(GenericRowData.of(
                    d.prompt == null ? null : StringData.fromString(d.prompt), StringData.fromString(d.id),
                    o.body == null ? new byte[0] : o.body, o.status, o.latencyMs, o.attempts,
                    o.error == null ? null : StringData.fromString(o.error), o.receivedAtMs,
                    d.id == null ? null : StringData.fromString(d.id), d.cached, StringData.fromString(o.replica)));
            futures.add(d.result);
        }
        complete(parse, rows, futures);
    }

    /**
     * Parses {@code rows} in one call and completes {@code futures.get(i)} with the row of {@code rows.get(i)}:
     * each exactly once. A parse step that gave fewer or more rows than bodies, or threw, is a defect of ours: the
     * rows it left are completed exceptionally (the job fails with why, no row waits for ever).
     */
    static void complete(ParseBatch parse, List<RowData> rows, List<CompletableFuture<Collection<RowData>>> futures) {
        int[] at = {0};
        RuntimeException failed = null;
        try {
            parse.parse(rows, row -> {
                if (at[0] >= futures.size()) {
                    throw new IllegalStateException("the parse step gave more rows than the " + futures.size()
                            + " bodies of its batch");
                }
                futures.get(at[0]++).complete(Collections.singletonList(((BinaryRowData) row).copy()));
            });
        } catch (RuntimeException e) { // ParseBatch turns a core failure into error rows; anything else:
            failed = e;
        }
        if (failed == null && at[0] < futures.size()) {
            failed = new IllegalStateException("dspark-vllm: the parse step gave " + at[0] + " rows for the "
                    + futures.size() + " bodies of its batch; please report it");
        }
        for (int i = at[0]; i < futures.size(); i++) {
            futures.get(i).completeExceptionally(failed);
        }
    }

    @Override
    public void close() throws Exception {
        if (inputCheck != null) {
            inputCheck.interrupt();
        }
        if (inputKey != null) {
            String model = PlanReader.readModel(JSON.readTree(planJson)).model;
            INPUTS.computeIfPresent(inputKey, (k, in) -> {
                if (--in.open > 0) {
                    return in;
                }
                in.sayIfNone(noneLine(model)); // the last instance to close: a bounded input that had no row
                return null;
            });
        }
        if (requests != null) {
            requests.close();
        }
        if (done != null) {
            done.close();
            LOG.info("dspark-vllm: the model parsed {} responses in {} batches", done.items(), done.batches());
        }
    }

    /**
     * The bytes that tell one INPUT row from another for the request key: each field written by Flink's own
     * serializer of its type (the same values give the same bytes in any subtask, after a restore or a rescale).
     */
    static final class RowIdentity {
        private final RowData.FieldGetter[] getters;
        private final org.apache.flink.api.common.typeutils.TypeSerializer<Object>[] serializers;

        @SuppressWarnings("unchecked")
        RowIdentity(RowType input) {
            getters = new RowData.FieldGetter[input.getFieldCount()];
            serializers = new org.apache.flink.api.common.typeutils.TypeSerializer[input.getFieldCount()];
            for (int i = 0; i < getters.length; i++) {
                getters[i] = RowData.createFieldGetter(input.getTypeAt(i), i);
                serializers[i] = (org.apache.flink.api.common.typeutils.TypeSerializer<Object>)
                        org.apache.flink.table.runtime.typeutils.InternalSerializers.create(input.getTypeAt(i));
            }
        }

        byte[] of(byte[] prefix, RowData row) throws java.io.IOException {
            org.apache.flink.core.memory.DataOutputSerializer out = new org.apache.flink.core.memory.DataOutputSerializer(256);
            out.writeInt(prefix.length);
            out.write(prefix);
            for (int i = 0; i < getters.length; i++) {
                Object v = getters[i].getFieldOrNull(row);
                out.writeBoolean(v == null);
                if (v != null) {
                    serializers[i].serialize(v, out);
                }
            }
            return out.getCopyOfBuffer();
        }
    }

    /** How a row becomes a request body: the plan's "prompt" and "body_columns" over the INPUT row. */
    static final class Prompt {
        final ObjectNode base;
        final boolean chat;
        final String system;
        final List<Object[]> template = new ArrayList<>(); // {literal, null} or {"", column index}
        final int messages;
        final int column;
        final List<Object[]> options = new ArrayList<>(); // {body key, column index, kind, rule or null}
        final RowData.FieldGetter[] getters;
        final List<String> names;

        Prompt(Plan.Model plan, RequestSpec spec, RowType input) throws Exception {
            Plan.Prompt p = plan.prompt;
            chat = p.chat;
            base = (ObjectNode) JSON.readTree(spec.body("\"\""));
            base.remove(chat ? "messages" : "prompt");
            system = p.system;
            if (p.template != null) {
                for (Plan.TemplatePart part : p.template) {
                    template.add(new Object[] {part.text, part.column == null ? null : part.column.intValue()});
                }
            }
            messages = p.messages == null ? -1 : p.messages.intValue();
            column = p.column == null ? -1 : p.column.intValue();
            for (Plan.BodyColumn o : plan.bodyColumns) {
                options.add(new Object[] {o.name, (int) o.index, o.kind, o.rule});
            }
            getters = new RowData.FieldGetter[input.getFieldCount()];
            for (int i = 0; i < getters.length; i++) {
                getters[i] = RowData.createFieldGetter(input.getTypeAt(i), i);
            }
            names = input.getFieldNames();
        }

        static final class Request {
            String text; // what request.prompt shows: the user message, or the messages as JSON
            byte[] body;
            String problem; // why the row cannot be sent
        }

        Request of(RowData row) {
            Request r = new Request();
            try {
                ObjectNode body = base.deepCopy();
                if (messages >= 0) {
                    ArrayData list = row.isNullAt(messages) ? null : row.getArray(messages);
                    if (list == null) {
                        r.problem = "INPUT column '" + names.get(messages) + "' (the messages) is NULL";
                        return r;
                    }
                    // A message no server takes (none at all, a NULL one, a NULL role or content) is the row's
                    // error, not a request: under 'fail-job' its 400 would restart the job on the row for ever.
                    String where = "INPUT column '" + names.get(messages) + "' (the messages) has ";
                    if (list.size() == 0) {
                        r.problem = where + "no message";
                        return r;
                    }
                    ArrayNode array = JSON.createArrayNode();
                    for (int i = 0; i < list.size(); i++) {
                        RowData m = list.isNullAt(i) ? null : list.getRow(i, 2);
                        String missing = m == null ? "a NULL message" : m.isNullAt(0) ? "a message with a NULL role"
                                : m.isNullAt(1) ? "a message with a NULL content" : null;
                        if (missing != null) {
                            r.problem = where + missing + " (message " + (i + 1) + ")";
                            return r;
                        }
                        array.addObject().put("role", m.getString(0).toString())
                                .put("content", m.getString(1).toString());
                    }
                    body.set("messages", array);
                    r.text = array.toString();
                } else {
                    String text;
                    if (column >= 0) {
                        Object v = getters[column].getFieldOrNull(row);
                        if (v == null) {
                            r.problem = "the prompt is NULL (INPUT column '" + names.get(column) + "')";
                            return r;
                        }
                        text = v.toString();
                    } else {
                        StringBuilder b = new StringBuilder();
                        for (Object[] part : template) {
                            b.append((String) part[0]);
                            if (part[1] != null) {
                                int index = (Integer) part[1];
                                Object v = getters[index].getFieldOrNull(row);
                                if (v == null) {
                                    r.problem = "INPUT column '" + names.get(index) + "' of 'prompt.template' is NULL";
                                    return r;
                                }
                                b.append(v);
                            }
                        }
                        text = b.toString();
                    }
                    r.text = text;
                    if (chat) {
                        ArrayNode array = body.putArray("messages");
                        if (system != null) {
                            array.addObject().put("role", "system").put("content", system);
                        }
                        array.addObject().put("role", "user").put("content", text);
                    } else {
                        body.put("prompt", text);
                    }
                }
                for (Object[] o : options) {
                    int index = (Integer) o[1];
                    Object v = getters[index].getFieldOrNull(row);
                    if (v == null) {
                        continue; // the model's option, if it has one
                    }
                    String key = (String) o[0];
                    String invalid = invalid(v, (Plan.Rule) o[3]);
                    if (invalid != null) {
                        r.problem = "INPUT column '" + names.get(index) + "' sets the request's '" + key + "' to "
                                + invalid + ": it must be " + ((Plan.Rule) o[3]).rule;
                        return r;
                    }
                    switch ((String) o[2]) {
                        case "int":
                            body.put(key, ((Number) v).longValue());
                            break;
                        case "float":
                            body.put(key, v instanceof DecimalData
                                    ? ((DecimalData) v).toBigDecimal().doubleValue() : ((Number) v).doubleValue());
                            break;
                        case "list[str]": {
                            ArrayData list = (ArrayData) v;
                            ArrayNode array = body.putArray(key);
                            for (int i = 0; i < list.size(); i++) {
                                array.add(list.isNullAt(i) ? null : list.getString(i).toString());
                            }
                            break;
                        }
                        default:
                            if (v.toString().isEmpty()) { // no model: the server's 404, a restart's too
                                r.problem = "INPUT column '" + names.get(index) + "' sets the request's '" + key
                                        + "' to an empty string";
                                return r;
                            }
                            body.put(key, v.toString());
                    }
                }
                if (Requester.loneSurrogate(r.text) >= 0) {
                    r.problem = "the prompt is not valid Unicode: a lone surrogate; it cannot be sent as UTF-8 JSON";
                    return r;
                }
                // The conversation first: 'prefix' routing keys a request by its body's first bytes, which were
                // the fixed options (the model, an answer schema's response_format) and so one key for every row.
                ObjectNode ordered = JSON.createObjectNode();
                String lead = chat ? "messages" : "prompt";
                ordered.set(lead, body.get(lead));
                ordered.setAll(body);
                r.body = JSON.writeValueAsBytes(ordered);
            } catch (Exception e) { // a row we cannot make a request of is an error row, never the job's failure
                r.problem = "the row cannot be made a request (" + e.getMessage() + ")";
            }
            return r;
        }

        /**
         * The row's value {@code v} as a message shows it where it breaks its option's {@code rule}
         * (connector.params: the type, the bounds, finite numbers, non-empty strings), else null.
         */
        static String invalid(Object v, Plan.Rule rule) {
            if (rule == null) {
                return null;
            }
            if (v instanceof ArrayData) {
                ArrayData list = (ArrayData) v;
                for (int i = 0; i < list.size(); i++) {
                    if (list.isNullAt(i) || list.getString(i).toBytes().length == 0) {
                        return "a list with " + (list.isNullAt(i) ? "a NULL" : "an empty string");
                    }
                }
                return null;
            }
            double d;
            String shown;
            if (v instanceof DecimalData) {
                java.math.BigDecimal b = ((DecimalData) v).toBigDecimal();
                d = b.doubleValue();
                shown = b.stripTrailingZeros().toPlainString();
            } else if (v instanceof Double || v instanceof Float) {
                d = ((Number) v).doubleValue();
                shown = Double.isFinite(d) ? java.math.BigDecimal.valueOf(d).stripTrailingZeros().toPlainString()
                        : Double.toString(d);
            } else {
                d = ((Number) v).doubleValue();
                shown = v.toString();
            }
            if (!Double.isFinite(d)) {
                return shown;
            }
            Double min = rule.min;
            Double max = rule.max;
            if (min != null && (rule.above ? d <= min : d < min)) {
                return shown;
            }
            if (max != null && (rule.below ? d >= max : d > max)) {
                return shown;
            }
            return null;
        }
    }
}
