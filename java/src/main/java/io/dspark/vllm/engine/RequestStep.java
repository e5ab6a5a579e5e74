package io.dspark.vllm.engine;

import io.dspark.vllm.plan.Plan;
import io.dspark.vllm.request.Outcome;
import io.dspark.vllm.plan.PlanContract;
import io.dspark.vllm.request.RequestSpec;
import io.dspark.vllm.store.StoredRequests;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.functions.async.ResultFuture;
import org.apache.flink.streaming.api.functions.async.RichAsyncFunction;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.RowType;

import java.util.Collections;
import java.util.List;

/**
 * The request step of a table in request mode: one prompt row ({@code _prompt}, {@code _request_id}: the prompts
 * source's row) in, the same row with the request's outcome out ({@code contract.REQUEST_COLUMNS},
 * {@link #ROW}), both as Flink's internal rows: the source's DataStream goes in and the parse step reads what
 * comes out, with no conversion between. Flink's async I/O operator
 * ({@code AsyncWaitOperator}) runs it: the elements in flight are part of every checkpoint and are sent again
 * after a restore, and nothing waits for them at a checkpoint; in unordered mode a row leaves as soon as its
 * response is read (no row overtakes a watermark).
 *
 * <p>Every prompt gives exactly one row: a failed request is a row with {@code _request_error} set (or fails the
 * job with {@code 'request.on-failure' = 'fail-job'}). Metrics, group {@code dspark}: numRequests, numResponses,
 * numRequestsFailed, numRetries, numBytesIn, numResponsesPerSecond, inFlight, concurrencyLimit, numThrottled,
 * latencyMsP50/P95/P99.
 */
public final class RequestStep extends RichAsyncFunction<RowData, RowData> implements CheckpointedFunction {
    private static final long serialVersionUID = 1L;
    // The row this step makes, as contract.REQUEST_COLUMNS declares it (generated into PlanContract); checked
    // against the plan in the constructor, so a plan of another release is refused.
    static final List<String> COLUMNS = PlanContract.REQUEST_COLUMN_NAMES;
    static final List<String> TYPES = PlanContract.REQUEST_COLUMN_TYPES;

    /** The rows this step makes (COLUMNS, TYPES), declared once for the operator that runs it. */
    static final RowType ROW = rowType();

    private static RowType rowType() {
        LogicalType[] types = new LogicalType[COLUMNS.size()];
        for (int i = 0; i < types.length; i++) {
            types[i] = SqlTypes.dataType(TYPES.get(i)).getLogicalType();
        }
        return RowType.of(types, COLUMNS.toArray(new String[0]));
    }

    /** The type information of {@link #ROW}, for the operator's output. */
    static InternalTypeInfo<RowData> typeInfo() {
        return InternalTypeInfo.of(ROW);
    }

    private final Plan.ClientSpec spec;
    private final boolean failJob;
    private final Plan.Store store; // 'request.store' and 'request.cache', or null

    private final long marginMs; // the async operator's timeout and a minute: no row stays in it longer

    private transient StoredRequests requests;
    private transient ListState<String> storePositions; // a Kafka store's, union: every subtask's after a restore
    private transient java.util.Map<Integer, Long> restoredPositions;
    private transient RequestMetrics metrics;

    RequestStep(Plan.TableRequest request) {
        Engine.checkRequestColumns(request.columns);
        this.spec = request.client;
        RequestSpec.of(spec); // refused here, where the job is planned, not on a TaskManager
        this.failJob = "fail-job".equals(request.onFailure);
        this.store = request.store;
        this.marginMs = request.timeoutMs + 60_000;
    }

    /**
     * A Kafka store's positions in the checkpoint (union state, {@link StoredRequests#checkpointEntry}): a restored
     * step reads the topic from the lowest of them, not whole. Flink's async operator hands a function that
     * implements {@link CheckpointedFunction} its state (AbstractUdfStreamOperator), before {@link #open}.
     */
    @Override
    public void initializeState(FunctionInitializationContext context) throws Exception {
        storePositions = context.getOperatorStateStore().getUnionListState(
                new ListStateDescriptor<>("dspark-vllm response store positions", String.class));
        if (context.isRestored() && store != null) {
            restoredPositions = StoredRequests.restoredPositions(storePositions.get(), store.uri);
        }
    }

    @Override
    public void snapshotState(FunctionSnapshotContext context) throws Exception {
        storePositions.clear();
        String entry = requests == null ? null : requests.checkpointEntry(marginMs);
        if (entry != null) {
            storePositions.add(entry);
        }
    }

    @Override
    public void open(OpenContext openContext) throws Exception {
        RequestSpec spec = RequestSpec.of(this.spec);
        requests = Engine.storedRequests(spec, store, getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(),
                getRuntimeContext().getTaskInfo().getNumberOfParallelSubtasks(), restoredPositions);
        metrics = new RequestMetrics(getRuntimeContext().getMetricGroup(), requests);
        if (getRuntimeContext().getTaskInfo().getIndexOfThisSubtask() == 0) {
            checkEndpoint(spec.url);
        }
    }

    /** {@link #reportUnreachable} on a thread of its own: the table's and the model's first subtask start it. */
    static void checkEndpoint(String url) {
        Thread check = new Thread(() -> reportUnreachable(url), "dspark-vllm endpoint check");
        check.setDaemon(true);
        check.start();
    }

    /**
     * Says at once, in one line on stderr (the console of a local job; a TaskManager's .out file on a cluster) and
     * in the log, when the endpoint's host does not resolve or takes no connection: requests are otherwise held and
     * retried quietly until 'request.retry.deadline' (5 min by default), which looks like a job doing nothing.
     */
    static void reportUnreachable(String url) {
        java.net.URI uri = java.net.URI.create(url);
        String host = uri.getHost();
        int port = uri.getPort() >= 0 ? uri.getPort() : ("https".equals(uri.getScheme()) ? 443 : 80);
        String failed;
        String check;
        try {
            java.net.InetAddress address = java.net.InetAddress.getByName(host);
            try (java.net.Socket socket = new java.net.Socket()) {
                socket.connect(new java.net.InetSocketAddress(address, port), 5_000);
                return;
            } catch (java.io.IOException e) {
                failed = "no connection to " + host + ":" + port + " (" + e.getMessage() + ")";
                check = "check that the server runs and listens there";
            }
        } catch (java.net.UnknownHostException e) {
            failed = "the host '" + host + "' does not resolve (DNS)";
            check = "check the host name in 'endpoint' (a compose service name resolves only inside its network)";
        }
        String line = "dspark-vllm: endpoint " + uri.getScheme() + "://" + uri.getRawAuthority() + ": " + failed
                + "; " + check + "; requests are held and retried until 'request.retry.deadline', then become "
                + "error rows";
        System.err.println(line);
        org.slf4j.LoggerFactory.getLogger(RequestStep.class).warn(line);
    }

    @Override
    public void asyncInvoke(RowData prompt, ResultFuture<RowData> result) {
        String text = prompt.isNullAt(0) ? null : prompt.getString(0).toString();
        String id = prompt.isNullAt(1) ? null : prompt.getString(1).toString();
        metrics.sent();
        requests.send(text == null ? "" : text, id).whenComplete((answer, bug) -> {
            if (bug != null) { // the requester never fails a future; a defect of ours costs this row only
                answer = new StoredRequests.Answer(new Outcome(null, null, 0.0, 0,
                        "request: internal error (" + bug + ")", PlanContract.REQUEST, System.currentTimeMillis()), null, false);
            }
            complete(text, id, answer.outcome, answer.key, answer.cached, result);
        });
    }

    private void complete(
            String text, String id, Outcome outcome, String key, boolean cached, ResultFuture<RowData> result) {
        metrics.ended(outcome);
        if (failJob && outcome.failedForGood()) {
            result.completeExceptionally(failedForGood(id, outcome));
            return;
        }
        RowData row = GenericRowData.of(
                StringData.fromString(text), StringData.fromString(id),
                outcome.body == null ? new byte[0] : outcome.body, outcome.status, outcome.latencyMs,
                outcome.attempts, StringData.fromString(outcome.error), outcome.receivedAtMs,
                StringData.fromString(key), cached, StringData.fromString(outcome.replica));
        result.complete(Collections.singletonList(row));
    }

    /**
     * The job's failure under {@code 'request.on-failure' = 'fail-job'}: which request, and why it failed (what
     * the restarts and the job's final failure show).
     */
    static RuntimeException failedForGood(String id, Outcome outcome) {
        return new RuntimeException("dspark-vllm: " + (id == null ? "a request" : "request " + id)
                + " failed for good ('request.on-failure' = 'fail-job'): " + outcome.error);
    }

    @Override
    public void timeout(RowData prompt, ResultFuture<RowData> result) {
        // A backstop only: the operator's timeout is longer than any request's deadline.
        Outcome outcome = new Outcome(null, null, 0.0, 0,
                "timeout: the request step did not answer within the operator's timeout", PlanContract.TIMEOUT,
                System.currentTimeMillis());
        complete(prompt.isNullAt(0) ? null : prompt.getString(0).toString(),
                prompt.isNullAt(1) ? null : prompt.getString(1).toString(), outcome, null, false, result);
    }

    @Override
    public void close() throws Exception {
        if (requests != null) {
            requests.close();
        }
    }
}
