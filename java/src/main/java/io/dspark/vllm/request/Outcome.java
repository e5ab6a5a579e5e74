package io.dspark.vllm.request;

import io.dspark.vllm.plan.PlanContract;
import java.io.Serializable;

/**
 * What one request ended with, after all its attempts.
 *
 * <p>{@code error} is null exactly when the request got a 2xx body; otherwise it is "kind: message" (the same
 * kinds: PlanContract.ERROR_KINDS: timeout, connect, status, stream, tls, protocol, too-large, request)
 * and {@code errorKind} the kind. {@code body} is the last attempt's body (an error JSON too), or null.
 */
public final class Outcome implements Serializable {
    private static final long serialVersionUID = 1L;

    public final byte[] body;
    public final Integer status;
    public final double latencyMs;
    public final int attempts;
    public final String error;
    public final String errorKind;
    public final long receivedAtMs;
    public final String replica; // the replica that gave the last attempt's answer, or null (none answered)

    public Outcome(
            byte[] body,
            Integer status,
            double latencyMs,
            int attempts,
            String error,
            String errorKind,
            long receivedAtMs) {
        this(body, status, latencyMs, attempts, error, errorKind, receivedAtMs, null);
    }

    public Outcome(
            byte[] body,
            Integer status,
            double latencyMs,
            int attempts,
            String error,
            String errorKind,
            long receivedAtMs,
            String replica) {
        this.replica = replica;
        this.body = body;
        this.status = status;
        this.latencyMs = latencyMs;
        this.attempts = attempts;
        this.error = error;
        this.errorKind = errorKind;
        this.receivedAtMs = receivedAtMs;
    }

    public boolean ok() {
        return error == null;
    }

    /**
     * Whether this is a request that failed for good (what {@code 'request.on-failure' = 'fail-job'} fails the job
     * on): not a row that could not be made a request ({@link Requester#notSent}: a NULL prompt, an invalid body
     * value), which is an error row whatever that option says: a restart would meet the same row again.
     */
    public boolean failedForGood() {
        return error != null && !(PlanContract.REQUEST.equals(errorKind) && attempts == 0);
    }
}
