package io.dspark.vllm.request;

import io.dspark.vllm.plan.PlanContract;
import io.dspark.vllm.plan.Plan;
import io.dspark.vllm.plan.PlanReader;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;

import java.io.Serializable;
import java.util.List;
import java.util.Map;

/**
 * How a table's requests are sent: the {@code "client"} object of the plan's {@code "request"} section, written by
 * {@code connector.plan.contract.client_spec} (Python) from the table's options. Everything a user sets is
 * validated there; this side only reads it. Its record ({@code Plan.ClientSpec}) and reader are generated from
 * connector/plan/records.py; a spec of another version ({@link #VERSION}) is refused there.
 *
 * <p>A request's body is {@code bodyPrefix + JSON string of the prompt + bodySuffix}: the planner renders the
 * whole request (model, messages or prompt, parameters, response_format) and leaves the prompt's place open.
 */
public final class RequestSpec implements Serializable {
    private static final long serialVersionUID = 1L;
    public static final int VERSION = PlanContract.CLIENT_SPEC_VERSION;

    public final String url; // the endpoint: http(s)://host:port/v1/chat/completions or /v1/completions
    public final String healthUrl; // probed while the server looks down
    public final List<String> urls; // every replica's url, the first being url (one: the endpoint named one)
    public final List<String> healthUrls; // and its health url, in the same order
    public final String routing; // "least-loaded" or "prefix" (see Replicas)
    public final int prefixBytes; // "prefix": the bytes of the prompt's head that choose its replica
    public final double loadBound; // "prefix": a replica's load against the mean (+1) beyond which it passes on
    public final double resolveIntervalS; // a host name's addresses are looked up again after this; 0: never
    public final Map<String, String> headers; // user-agent, content-type, authorization (a secret: never logged)
    public final String bodyPrefix;
    public final String bodySuffix;
    public final double timeoutS; // one attempt, first byte sent to last byte read
    public final double connectTimeoutS;
    public final double deadlineS; // one request: attempts, backoff and waits at the gate together
    public final int maxAttempts; // 0: as many as fit in the deadline
    public final double backoffInitialS;
    public final double backoffMaxS;
    public final double maxRetryAfterS;
    public final boolean holdWhileDown;
    public final double rateLimit; // attempts per second per instance; 0: none
    public final long maxBodyBytes;
    public final boolean tlsVerify;
    public final String tlsCaBundle; // PEM file on the TaskManager, or null (then the JDK's public CAs)
    public final String tlsClientCert;
    public final String tlsClientKey;
    public final boolean adaptive; // 'request.concurrency' = 'auto'
    public final int concurrency; // the fixed limit, or the adaptive limit's start
    public final int minConcurrency;
    public final int maxConcurrency; // also the async operator's capacity

    private final Plan.ClientSpec record;

    private RequestSpec(Plan.ClientSpec n, double deadlineS, double timeoutS) {
        record = n;
        url = n.url;
        healthUrl = n.healthUrl;
        urls = n.urls;
        healthUrls = n.healthUrls;
        if (urls.isEmpty() || urls.size() != healthUrls.size()) {
            throw new IllegalArgumentException("dspark-vllm: the plan's request spec has " + urls.size()
                    + " urls and " + healthUrls.size() + " health urls");
        }
        routing = n.routing.mode;
        prefixBytes = (int) n.routing.prefixBytes;
        loadBound = n.routing.loadBound;
        resolveIntervalS = n.routing.resolveIntervalS;
        headers = n.headers;
        bodyPrefix = n.bodyPrefix;
        bodySuffix = n.bodySuffix;
        this.timeoutS = timeoutS;
        connectTimeoutS = n.connectTimeoutS;
        this.deadlineS = deadlineS;
        maxAttempts = n.maxAttempts == null ? 0 : n.maxAttempts.intValue();
        backoffInitialS = n.backoffInitialS;
        backoffMaxS = n.backoffMaxS;
        maxRetryAfterS = n.maxRetryAfterS;
        holdWhileDown = n.holdWhileDown;
        rateLimit = n.rateLimit == null ? 0.0 : n.rateLimit;
        maxBodyBytes = n.maxBodyBytes;
        tlsVerify = n.tls.verify;
        tlsCaBundle = n.tls.caBundle;
        tlsClientCert = n.tls.clientCert;
        tlsClientKey = n.tls.clientKey;
        adaptive = n.concurrency.adaptive;
        concurrency = (int) n.concurrency.initial;
        minConcurrency = (int) n.concurrency.min;
        maxConcurrency = (int) n.concurrency.max;
    }

    /**
     * From the plan's record; headers the request step cannot send (an API key with a line break) are refused here,
     * where the faces read the plan as the query is planned.
     */
    public static RequestSpec of(Plan.ClientSpec spec) {
        Requester.checkHeaders(spec.headers);
        return new RequestSpec(spec, spec.deadlineS, spec.timeoutS);
    }

    /** This spec with each request ended by {@code deadlineS} (and an attempt too). */
    public RequestSpec within(double deadlineS) {
        return new RequestSpec(record, deadlineS, Math.min(timeoutS, deadlineS));
    }

    /** From its JSON, read (and its version checked) by the generated {@link PlanReader}. */
    public static RequestSpec fromJson(JsonNode node) {
        return of(PlanReader.readClientSpec(node));
    }

    /** The body of one request. */
    public String body(String promptJson) {
        return bodyPrefix + promptJson + bodySuffix;
    }

    @Override
    public String toString() {
        return "RequestSpec(" + String.join(",", urls) + ", concurrency="
                + (adaptive ? "auto " + minConcurrency + ".." + maxConcurrency
                : String.valueOf(concurrency)) + ")"; // never the headers: they hold the API key
    }
}
