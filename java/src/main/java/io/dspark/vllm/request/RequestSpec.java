package io.dspark.vllm.request;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * How a table's requests are sent: the {@code "client"} object of the plan's {@code "request"} section, written by
 * {@code connector.flink.contract.client_spec} (Python) from the table's options. Everything a user sets is
 * validated there; this side only reads it. The JSON carries {@code "version"}: {@link #VERSION}, and a plan of
 * another version is refused, so the two sides never disagree silently.
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

    private RequestSpec(JsonNode n) {
        int version = n.path("version").asInt(-1);
        if (version != VERSION) {
            throw new IllegalArgumentException(
                    "dspark-vllm: the plan's request spec has version " + version + ", this jar reads version "
                            + VERSION + ": install the same dspark-vllm on the client and the TaskManagers");
        }
        url = n.get("url").asText();
        healthUrl = n.get("health_url").asText();
        urls = texts(n.get("urls"), url);
        healthUrls = texts(n.get("health_urls"), healthUrl);
        if (urls.size() != healthUrls.size()) {
            throw new IllegalArgumentException("dspark-vllm: the plan's request spec has " + urls.size()
                    + " urls and " + healthUrls.size() + " health urls");
        }
        JsonNode r = n.path("routing");
        routing = r.path("mode").asText("least-loaded");
        prefixBytes = r.path("prefix_bytes").asInt(256);
        loadBound = r.path("load_bound").asDouble(1.25);
        resolveIntervalS = r.path("resolve_interval_s").asDouble(30.0);
        Map<String, String> h = new LinkedHashMap<>();
        n.get("headers").fields().forEachRemaining(e -> h.put(e.getKey(), e.getValue().asText()));
        headers = Collections.unmodifiableMap(h);
        bodyPrefix = n.get("body_prefix").asText();
        bodySuffix = n.get("body_suffix").asText();
        timeoutS = n.get("timeout_s").asDouble();
        connectTimeoutS = n.get("connect_timeout_s").asDouble();
        deadlineS = n.get("deadline_s").asDouble();
        maxAttempts = n.path("max_attempts").isNull() ? 0 : n.path("max_attempts").asInt(0);
        backoffInitialS = n.get("backoff_initial_s").asDouble();
        backoffMaxS = n.get("backoff_max_s").asDouble();
        maxRetryAfterS = n.get("max_retry_after_s").asDouble();
        holdWhileDown = n.get("hold_while_down").asBoolean();
        rateLimit = n.path("rate_limit").isNull() ? 0.0 : n.path("rate_limit").asDouble(0.0);
        maxBodyBytes = n.get("max_body_bytes").asLong();
        JsonNode tls = n.get("tls");
        tlsVerify = tls.get("verify").asBoolean();
        tlsCaBundle = text(tls, "ca_bundle");
        tlsClientCert = text(tls, "client_cert");
        tlsClientKey = text(tls, "client_key");
        JsonNode c = n.get("concurrency");
        adaptive = c.get("adaptive").asBoolean();
        concurrency = c.get("initial").asInt();
        minConcurrency = c.get("min").asInt();
        maxConcurrency = c.get("max").asInt();
    }

    public static RequestSpec fromJson(JsonNode node) {
        return new RequestSpec(node);
    }

    private static List<String> texts(JsonNode list, String single) {
        if (list == null || list.isNull()) {
            return List.of(single);
        }
        List<String> out = new ArrayList<>();
        list.forEach(v -> out.add(v.asText()));
        return List.copyOf(out);
    }

    private static String text(JsonNode node, String key) {
        JsonNode v = node.get(key);
        return v == null || v.isNull() ? null : v.asText();
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
