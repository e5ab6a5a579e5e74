package io.dspark.vllm.request;

import io.dspark.vllm.plan.PlanContract;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.core.io.JsonStringEncoder;
import org.apache.flink.shaded.netty4.io.netty.handler.codec.http.DefaultHttpHeaders;
import org.apache.flink.shaded.netty4.io.netty.handler.codec.http.HttpHeaders;
import org.apache.flink.shaded.netty4.io.netty.handler.codec.http.HttpMethod;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.Locale;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import javax.net.ssl.SSLContext;

/**
 * Sends a table's requests (over {@link Transport}): bounded or adaptive concurrency, a deadline per attempt
 * and per request, retries with backoff and jitter, Retry-After, a gate that holds requests back while the
 * server is down, a rate limit, a cap on body size, TLS as the spec says. The project's one request engine (the
 * error kinds are declared in connector/server/outcome.py, generated into PlanContract); no Flink in here.
 *
 * <p>Everything is asynchronous: a request is a small state machine driven by the transport's event loop (one
 * daemon thread: connections, attempt timeouts, responses, and the slots freed by them) and by one timer thread
 * (backoff, Retry-After, the rate limit, the gate's probes). No thread ever waits for a request. The futures that
 * {@link #send} returns complete on those threads: what depends on them must not block.
 *
 * <p>One request: [wait at the gate while the server is down] -> [the rate limit's next slot] -> [a free
 * connection slot, FIFO] -> one attempt (at most {@code timeout_s}, cut to what is left of the deadline) ->
 * done, or wait (Retry-After capped by {@code max_retry_after_s}, else equal-jitter exponential backoff) and go
 * again, while attempts and the deadline allow. Retried: connect errors, timeouts, broken connections and
 * 408/429/502/503/504 (not an answer that is not HTTP/1.1: docs/client-and-simulator.md). Concurrency: see
 * {@link Slots} (fixed, or AIMD with a ceiling).
 *
 * <p>HTTP/1.1 only, keep-alive, redirects never followed, no proxy (nothing from system properties), no
 * cookies. The headers (the API key among them) are never logged nor shown by {@link #toString()}.
 */
public final class Requester implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(Requester.class);
    private static final AtomicInteger INSTANCES = new AtomicInteger();
    private static final long PROBE_BODY_LIMIT = 64 * 1024;
    // 2^62 times any backoff_initial_s passes any backoff_max_s: the step stops growing there
    // (MAX_EXPONENT), and a count of attempts or of the gate's probes never makes it
    // infinite, or NaN (0 x infinity).
    private static final int MAX_EXPONENT = 62;

    private final RequestSpec spec;
    private final HttpHeaders headers; // the spec's, validated once; each request adds its id
    private final HttpHeaders probeHeaders;
    private final ScheduledExecutorService timer;
    private final Transport transport;
    private final Replicas replicas;
    private final RateLimit rateLimit;
    private final Set<Call> active = ConcurrentHashMap.newKeySet();
    private final AtomicLong throttled = new AtomicLong();
    private final AtomicLong attemptsSent = new AtomicLong();
    private final Set<Class<?>> unexpectedLogged = ConcurrentHashMap.newKeySet(); // logged with a stack trace
    private volatile boolean closed;

    public Requester(RequestSpec spec) {
        this(spec, 1);
    }

    /**
     * One of {@code senders} requesters that send to the same replicas (a job's parallel instances, each its own):
     * with 'auto' concurrency each starts at its share of the start (see {@link Slots}).
     */
    public Requester(RequestSpec spec, int senders) {
        this(spec, Replicas.SYSTEM, senders);
    }

    /** With host names looked up by {@code resolver} (tests: a name that resolves to several addresses). */
    Requester(RequestSpec spec, Replicas.Resolver resolver) {
        this(spec, resolver, 1);
    }

    private Requester(RequestSpec spec, Replicas.Resolver resolver, int senders) {
        this.spec = spec;
        boolean https = false;
        for (String u : spec.urls) {
            https |= "https".equalsIgnoreCase(Replicas.uri(u, "url").getScheme());
        }
        for (String u : spec.healthUrls) {
            https |= "https".equalsIgnoreCase(Replicas.uri(u, "health_url").getScheme());
        }
        this.headers = headers(spec.headers, true);
        this.probeHeaders = headers(spec.headers, false);
        SSLContext tls = https ? Tls.context(spec) : null;
        int n = INSTANCES.incrementAndGet();
        ScheduledThreadPoolExecutor t = new ScheduledThreadPoolExecutor(1, daemon("dspark-vllm-timer-" + n));
        t.setRemoveOnCancelPolicy(true);
        this.timer = t;
        this.transport = new Transport("dspark-vllm-http-" + n, tls, spec.tlsVerify, spec.connectTimeoutS,
                Math.max(PROBE_BODY_LIMIT, spec.maxBodyBytes));
        this.replicas = new Replicas(spec, transport.loop(), timer, resolver, this::probe,
                "dspark-vllm-resolve-" + n, senders);
        this.rateLimit = spec.rateLimit > 0 ? new RateLimit(spec.rateLimit) : null;
    }

    /**
     * The spec's headers, checked once (a name the transport sets itself, or a name or value a header cannot
     * hold, is refused with the name only: the value may be the API key); with {@code body}, content-type
     * application/json unless the spec gives one, else without any content-type.
     */
    private static HttpHeaders headers(Map<String, String> given, boolean body) {
        HttpHeaders h = new DefaultHttpHeaders(true);
        for (Map.Entry<String, String> e : given.entrySet()) {
            String name = e.getKey();
            boolean contentType = name.equalsIgnoreCase("content-type");
            if (name.equalsIgnoreCase("x-request-id") || (contentType && !body)) {
                continue; // one per request, the same on every attempt; a probe sends no body
            }
            if (Transport.RESTRICTED.contains(name.toLowerCase(Locale.ROOT)) || !headerValue(e.getValue())) {
                throw refused(name);
            }
            try {
                h.add(name, e.getValue());
            } catch (IllegalArgumentException | NullPointerException x) {
                throw refused(name);
            }
        }
        if (body && !h.contains("content-type")) {
            h.set("content-type", "application/json");
        }
        return h;
    }

    /** Refuses headers the request step cannot send ({@link #headers}): {@link RequestSpec#of}, at planning. */
    static void checkHeaders(Map<String, String> given) {
        headers(given, true);
    }

    private static IllegalArgumentException refused(String name) {
        if (name.equalsIgnoreCase("authorization")) { // the planner's, from 'api-key', 'api-key.env' or 'api-key.file'
            return new IllegalArgumentException("dspark-vllm: the API key holds characters an HTTP header cannot "
                    + "carry (a line break, another control character or a character beyond Latin-1); give the key "
                    + "alone", null);
        }
        return new IllegalArgumentException("dspark-vllm: the header '" + name
                + "' cannot be sent (a restricted name, or characters a header cannot hold)", null);
    }

    /** What a header value can hold as it is (RFC 9110 field-value): visible ASCII, space, tab, obs-text. */
    static boolean headerValue(String v) {
        if (v == null) {
            return false;
        }
        for (int i = 0; i < v.length(); i++) {
            char c = v.charAt(i);
            if ((c < 0x20 && c != '\t') || c == 0x7f || c > 0xff) {
                return false;
            }
        }
        return true;
    }

    private static ThreadFactory daemon(String name) {
        AtomicInteger count = new AtomicInteger();
        return r -> {
            Thread t = new Thread(r, name + "-" + count.incrementAndGet());
            t.setDaemon(true);
            return t;
        };
    }

    private static long nanos(double s) {
        return Math.max(1L, (long) Math.min(Long.MAX_VALUE / 2.0, s * 1e9));
    }

    /** Seconds to wait after failed attempt {@code attempt} (1-based): equal jitter over an exponential step. */
    static double backoff(int attempt, double initialS, double maxS, Random random) {
        double step = Math.min(maxS, initialS * Math.pow(2, Math.min(Math.max(attempt - 1, 0), MAX_EXPONENT)));
        return step / 2 + random.nextDouble() * step / 2;
    }

    /**
     * Seconds to wait after failed attempt {@code attempt}: the backoff, or the server's {@code Retry-After} (cut to
     * {@code max_retry_after_s}) when that is longer. Never less than the
     * backoff: a {@code Retry-After} of 0, negative or in the past, on every answer, was a retry storm.
     */
    static double retryDelay(int attempt, Double retryAfterS, RequestSpec spec, Random random) {
        double delay = backoff(attempt, spec.backoffInitialS, spec.backoffMaxS, random);
        return retryAfterS == null ? delay : Math.max(delay, Math.min(retryAfterS, spec.maxRetryAfterS));
    }

    // --- the public face ------------------------------------------------------------------

    /** One request; the future never completes exceptionally: every failure is an {@link Outcome}. */
    public CompletableFuture<Outcome> send(String prompt, String requestId) {
        long start = System.nanoTime();
        if (closed) {
            return CompletableFuture.completedFuture(invalid("the request step was closed", start));
        }
        if (prompt == null) {
            return CompletableFuture.completedFuture(invalid("the prompt is NULL", start));
        }
        int bad = Text.loneSurrogate(prompt);
        if (bad >= 0) {
            return CompletableFuture.completedFuture(invalid("the prompt is not valid Unicode: a lone surrogate "
                    + "(U+" + String.format("%04X", (int) prompt.charAt(bad)) + ") at character " + bad
                    + "; it cannot be sent as UTF-8 JSON", start));
        }
        return sendBody(bodyOf(prompt), requestId, null, start);
    }

    /** The body {@link #send} sends for {@code prompt}, or null where it sends none (NULL, a lone surrogate). */
    public byte[] bodyOf(String prompt) {
        if (prompt == null || Text.loneSurrogate(prompt) >= 0) {
            return null;
        }
        String quoted = "\"" + new String(JsonStringEncoder.getInstance().quoteAsString(prompt)) + "\"";
        return spec.body(quoted).getBytes(StandardCharsets.UTF_8);
    }

    /**
     * The endpoint's URL the requests go to; with several replicas, their URLs joined by commas (a response is
     * the endpoint's, whichever replica gave it).
     */
    public String url() {
        return spec.urls.size() == 1 ? spec.url : String.join(",", spec.urls);
    }

    /** The replicas now (a name's addresses change as it is looked up again). */
    public java.util.List<Replicas.Replica> replicas() {
        return replicas.list();
    }

    /** Calls {@code c} with each replica there is, now and as new ones join. */
    public void onReplica(java.util.function.Consumer<Replicas.Replica> c) {
        replicas.onAdded(c);
    }

    /**
     * One request whose body the caller made (a model's row: its messages and options, as UTF-8 JSON); as
     * {@link #send}, the future never completes exceptionally.
     */
    public CompletableFuture<Outcome> sendBody(byte[] content, String requestId) {
        return sendBody(content, requestId, (byte[]) null);
    }

    /**
     * As {@link #sendBody(byte[], String)}, routed by {@code routingKey} (a model's 'request.routing.key-column':
     * a session or user id) instead of the body's head where routing is 'prefix'; null: by the head.
     */
    public CompletableFuture<Outcome> sendBody(byte[] content, String requestId, byte[] routingKey) {
        long start = System.nanoTime();
        if (closed) {
            return CompletableFuture.completedFuture(invalid("the request step was closed", start));
        }
        return sendBody(content, requestId, routingKey, start);
    }

    /** Where {@code text} has a UTF-16 surrogate without its pair (it cannot be sent as UTF-8), or -1. */
    public static int loneSurrogate(String text) {
        return Text.loneSurrogate(text);
    }

    /** A duration in seconds as every error row says one ("0.3", "0.001", "175"). */
    public static String seconds(double s) {
        return Text.seconds(s);
    }

    /** An error outcome of a request that was never sent ("request: " + why), for a caller's own checks. */
    public static Outcome notSent(String why) {
        return new Outcome(null, null, 0.0, 0, "request: " + why, PlanContract.REQUEST, System.currentTimeMillis());
    }

    private CompletableFuture<Outcome> sendBody(byte[] content, String requestId, byte[] routingKey, long start) {
        if (requestId == null || !headerValue(requestId)) {
            return CompletableFuture.completedFuture(invalid("the request id cannot be sent as a header", start));
        }
        HttpHeaders h = new DefaultHttpHeaders(false).add(headers).set("x-request-id", requestId);
        Call call = new Call(content, h, requestId, start);
        if (replicas.keyed()) {
            call.keyHash = replicas.keyOf(content, routingKey);
        }
        active.add(call);
        if (closed) { // close() ran meanwhile and may not have seen it
            call.abandon();
            return call.future;
        }
        call.step();
        return call.future;
    }

    /** Requests started and not yet ended (waiting for a slot, at the gate, in backoff or on the wire). */
    public int inFlight() {
        return active.size();
    }

    /** Attempts allowed on the wire at once now (fixed, or what the adaptive limit says). */
    public int concurrencyLimit() {
        int sum = 0;
        for (Replicas.Replica r : replicas.list()) {
            sum += r.limit();
        }
        return sum;
    }

    /** Attempts answered 429 or 503 so far. */
    public long throttled() {
        return throttled.get();
    }

    /** Attempts on the wire now. */
    public int attemptsOnTheWire() {
        int sum = 0;
        for (Replicas.Replica r : replicas.list()) {
            sum += r.inFlight();
        }
        return sum;
    }

    /** Attempts sent so far (retries included). */
    public long attempts() {
        return attemptsSent.get();
    }

    /** Whether the gate holds requests back now (the server looked down and has not answered since). */
    public boolean serverDown() {
        return replicas.holds() && !replicas.anyIn();
    }

    /** Health probes sent while the server (a replica) looked down. */
    public long probes() {
        long sum = 0;
        for (Replicas.Replica r : replicas.list()) {
            sum += r.gate == null ? 0 : r.gate.probes();
        }
        return sum;
    }

    /** Times the gate closed (a replica was ejected). */
    public long gateClosures() {
        long sum = 0;
        for (Replicas.Replica r : replicas.list()) {
            sum += r.gate == null ? 0 : r.gate.closures();
        }
        return sum;
    }

    @Override
    public String toString() {
        return "Requester(" + spec + ")"; // never the headers: they hold the API key
    }

    /**
     * Stops the timers and the probes; requests not ended yet end now, with an Outcome of kind "request" ("the
     * request step was closed"), attempts on the wire are cancelled. Later sends end the same way at once.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        replicas.close();
        for (Call call : active.toArray(new Call[0])) {
            call.abandon();
        }
        timer.shutdownNow();
        transport.close();
    }

    private Outcome invalid(String message, long startNs) {
        return new Outcome(null, null, (System.nanoTime() - startNs) / 1e6, 0, "request: " + message, PlanContract.REQUEST,
                System.currentTimeMillis());
    }

    private ScheduledFuture<?> later(Runnable r, double delayS) {
        try {
            return timer.schedule(r, (long) (delayS * 1e9), TimeUnit.NANOSECONDS);
        } catch (RejectedExecutionException e) { // closed: the call is abandoned by close()
            return null;
        }
    }

    /**
     * While the gate is closed: does the server answer (anything below 500) on the health URL? The status says
     * it, whatever becomes of the body (over the limit, cut).
     */
    private CompletableFuture<Boolean> probe(Replicas.Replica replica) {
        if (closed) {
            return CompletableFuture.completedFuture(false);
        }
        CompletableFuture<Boolean> result = new CompletableFuture<>();
        transport.send(replica.healthUri, replica.address, HttpMethod.GET, probeHeaders, new byte[0],
                PROBE_BODY_LIMIT, nanos(spec.connectTimeoutS + 5), (response, e, head) -> result.complete(e == null
                        ? response.status < 500 : head != null && head < 500));
        return result;
    }

    // --- one request --------------------------------------------------------------------

    /** What one attempt ended with. */
    private static final class Result {
        static final Result NONE = new Result(null, null, null, null);
        final Integer status;
        final byte[] body;
        final Failure failure;
        final Double retryAfterS;

        Result(Integer status, byte[] body, Failure failure, Double retryAfterS) {
            this.status = status;
            this.body = body;
            this.failure = failure;
            this.retryAfterS = retryAfterS;
        }

        Result withFailure(Failure f) {
            return new Result(status, body, f, retryAfterS);
        }
    }

    private final class Call {
        final byte[] content;
        final HttpHeaders headers;
        final String requestId;
        final long startNs;
        final long deadlineNs;
        final CompletableFuture<Outcome> future = new CompletableFuture<>();
        final AtomicBoolean ended = new AtomicBoolean();
        // Changed by one callback at a time (each step hands over to the next), read by close().
        volatile int attempts;
        volatile Result result = Result.NONE;
        volatile String why = ""; // why it gave up, where the failure does not say
        volatile Attempt current;
        volatile Replicas.Replica replica; // the last attempt's
        long keyHash; // 'prefix' routing: the hash of the routing key, or of the body's head
        volatile Replicas.Replica avoid; // the replica of the failed attempt before: another, if one has room
        volatile int elsewhere; // attempts sent to another replica after a 5xx that is not retried on the same one

        Call(byte[] content, HttpHeaders headers, String requestId, long startNs) {
            this.content = content;
            this.headers = headers;
            this.requestId = requestId;
            this.startNs = startNs;
            this.deadlineNs = startNs + (long) (spec.deadlineS * 1e9);
        }

        void step() {
            if (ended.get()) {
                return;
            }
            if (replicas.holds() && !replicas.anyIn()) {
                replicas.awaitIn((deadlineNs - System.nanoTime()) / 1e9, opened -> {
                    if (opened) {
                        afterGate();
                    } else {
                        if (result.failure == null) {
                            result = result.withFailure(replicas.reason());
                        }
                        finish();
                    }
                });
                return;
            }
            afterGate();
        }

        private void afterGate() {
            if (ended.get()) {
                return;
            }
            if (rateLimit != null) {
                long waitNs = rateLimit.reserveNs();
                if (waitNs > 0) {
                    if (later(this::acquire, waitNs / 1e9) == null) {
                        abandon();
                    }
                    return;
                }
            }
            acquire();
        }

        private void acquire() {
            replicas.acquire(new Replicas.Waiter(replicas.keyed(), keyHash, avoid, this::onSlot));
        }

        private void onSlot(Replicas.Replica on, long epoch) {
            if (ended.get()) {
                replicas.release(on);
                return;
            }
            long remainingNs = deadlineNs - System.nanoTime();
            if (remainingNs <= 0) {
                replicas.release(on);
                if (result.failure == null) {
                    result = result.withFailure(Failure.timeout("the request's deadline of "
                            + Text.seconds(spec.deadlineS) + " s passed before a connection was free"));
                }
                finish();
                return;
            }
            attempts++;
            attemptsSent.incrementAndGet();
            replica = on;
            Attempt attempt = new Attempt(this, on, Math.min(spec.timeoutS, remainingNs / 1e9), epoch);
            current = attempt;
            attempt.start();
        }

        void onAttempt(Attempt attempt, Result r) {
            current = null;
            Replicas.Replica on = attempt.replica;
            boolean throttle = r.status != null && (r.status == 429 || r.status == 503);
            if (throttle) {
                throttled.incrementAndGet();
                on.throttled.incrementAndGet();
            }
            boolean timedOut = r.failure != null && r.failure.kind.equals(PlanContract.TIMEOUT);
            // The replica held it for (nearly) its whole timeout and did not answer: a hang, counted against it as a
            // 5xx is, and a throttle to its limit. One cut short by the deadline (the request waited here for a
            // slot, or in backoff) is neither: lowering the limit for it would make the queue here longer still.
            boolean hung = timedOut && attempt.timeoutS >= Replicas.HUNG_SHARE * spec.timeoutS;
            double okRtt = r.failure == null ? (System.nanoTime() - attempt.startNs) / 1e6 : Double.NaN;
            if (r.failure == null) {
                on.answers.incrementAndGet();
                on.latencies.add(okRtt);
            }
            // The limit learns first: a slot freed by a 429 goes to the next request only under the lowered limit.
            on.slots.onResult(attempt.epoch, throttle || hung, okRtt);
            replicas.release(on);
            if (ended.get()) {
                return;
            }
            replicas.judge(on, r.status, r.failure, hung, attempt.startNs); // (its own result, not the one kept below)
            if (timedOut && attempt.timeoutS < spec.timeoutS && result.failure != null) {
                r = result; // the deadline, not the server, cut this attempt short: the error that led to it says more
            }
            result = r;
            Failure f = r.failure;
            if (f != null && !f.retryable && replicas.replicaFault(r.status, f, false) && replicas.anotherIn(on)
                    && elsewhere < replicas.list().size() - 1
                    && (spec.maxAttempts == 0 || attempts < spec.maxAttempts)) {
                // A 500 (or another 5xx that is not retried), a failed TLS handshake or an answer that is no HTTP:
                // with one server, the same server would answer the same way; with several, another replica may
                // not (an engine that died while /health still answers, a wrong certificate or port on one): it
                // takes the request now, once each at most, so a request every replica refuses ends soon.
                elsewhere++;
                avoid = on;
                step();
                return;
            }
            if (f == null || !f.retryable) {
                finish();
                return;
            }
            if (spec.maxAttempts > 0 && attempts >= spec.maxAttempts) {
                finish();
                return;
            }
            avoid = on; // the next attempt goes to another replica where one has room
            if (replicas.holds() && !replicas.anyIn() && r.status == null) {
                step(); // no connection: the gate's probes pace the next attempt
                return;
            }
            if (replicas.replicaFault(r.status, f, hung) && replicas.anotherIn(on)) {
                step(); // this replica's trouble, not the request's: another takes it now
                return;
            }
            if (throttle && r.status == 429 && replicas.several() && replicas.roomElsewhere(on)) {
                step(); // this replica is full, another has room: its Retry-After holds this replica only
                return;
            }
            // (a 502/503 that closed the gate waits too: its gateway answers, and so may /health, which would
            // open the gate after one short probe step every time)
            double delay = retryDelay(attempts, r.retryAfterS, spec, ThreadLocalRandom.current());
            double leftS = (deadlineNs - System.nanoTime()) / 1e9;
            if (delay >= leftS) { // (in seconds: a huge wait overflows nanoseconds)
                boolean asked = r.retryAfterS != null && delay == Math.min(r.retryAfterS, spec.maxRetryAfterS);
                why = ": the " + (asked ? "Retry-After" : "backoff") + " wait of "
                        + (Double.isFinite(delay) ? Text.oneDecimal(delay) : "inf")
                        + " s ends past the deadline, " + Text.oneDecimal(Math.max(0.0, leftS)) + " s away";
                finish();
                return;
            }
            if (LOG.isDebugEnabled()) {
                LOG.debug("request {}: attempt {} failed ({}); retrying in {} s", requestId, attempts, f.text(),
                        String.format(java.util.Locale.ROOT, "%.3f", delay));
            }
            if (later(this::step, delay) == null) {
                abandon();
            }
        }

        void finish() {
            if (!ended.compareAndSet(false, true)) {
                return;
            }
            active.remove(this);
            Result r = result;
            Failure f = r.failure;
            String text = f == null ? null : f.text();
            double elapsedS = (System.nanoTime() - startNs) / 1e9;
            if (f != null && (f.retryable || attempts == 0)) {
                text = text + " (gave up after " + attempts + (attempts == 1 ? " attempt" : " attempts") + " in "
                        + Text.oneDecimal(elapsedS) + " s" + why + ")";
            }
            Replicas.Replica answered = r.status == null ? null : replica;
            future.complete(new Outcome(r.body, r.status, (System.nanoTime() - startNs) / 1e6, attempts, text,
                    f == null ? null : f.kind, System.currentTimeMillis(), answered == null ? null : answered.name));
        }

        /** close(): end now, whatever it was doing. */
        void abandon() {
            if (!ended.compareAndSet(false, true)) {
                return;
            }
            active.remove(this);
            Attempt a = current;
            if (a != null) {
                a.cancel();
            }
            future.complete(new Outcome(null, result.status, (System.nanoTime() - startNs) / 1e6, attempts,
                    "request: the request step was closed", PlanContract.REQUEST, System.currentTimeMillis()));
        }
    }

    // --- one attempt --------------------------------------------------------------------

    private final class Attempt {
        final Call call;
        final Replicas.Replica replica;
        final double timeoutS;
        final long epoch;
        final long startNs = System.nanoTime();
        final AtomicBoolean done = new AtomicBoolean();
        volatile Transport.Exchange exchange;

        Attempt(Call call, Replicas.Replica replica, double timeoutS, long epoch) {
            this.call = call;
            this.replica = replica;
            this.timeoutS = timeoutS;
            this.epoch = epoch;
        }

        void start() {
            exchange = transport.send(replica.uri, replica.address, HttpMethod.POST, call.headers, call.content,
                    spec.maxBodyBytes, nanos(timeoutS), this::ended);
        }

        private void ended(Transport.Response response, Throwable e, Integer head) {
            if (e == null) {
                int status = response.status;
                Result r;
                try {
                    Failure f = Failure.ofStatus(status, response.body, response.header("location"));
                    Double retryAfter = f != null && f.retryable
                            ? Text.parseRetryAfter(response.header("retry-after"), System.currentTimeMillis())
                            : null;
                    r = new Result(status, response.body, f, retryAfter);
                } catch (RuntimeException | StackOverflowError x) {
                    // A response that the code above did not foresee (a bug, here or in a library): this request's
                    // outcome, never a request that ends no more (nor a slot that is never freed).
                    r = new Result(status, response.body, unexpected(x, call.requestId), null);
                }
                end(r);
            } else if (e instanceof Transport.TimedOut) {
                end(new Result(head, null,
                        Failure.timeout("no complete response within " + Text.seconds(timeoutS) + " s"), null));
            } else if (e instanceof Transport.Cancelled) {
                end(new Result(head, null, Failure.request("the request step was closed"), null));
            } else {
                Failure f = Failure.of(e, head != null, replica.target);
                end(new Result(f.kind.equals(PlanContract.TLS) ? null : head, null, f, null));
            }
        }

        private void end(Result r) {
            if (done.compareAndSet(false, true)) {
                call.onAttempt(this, r);
            }
        }

        void cancel() {
            if (done.compareAndSet(false, true)) {
                Transport.Exchange x = exchange;
                if (x != null) {
                    x.cancel();
                }
                replicas.release(replica);
            }
        }
    }

    /** The failure of an attempt that threw {@code x}, logged with its stack trace (the first of each type). */
    private Failure unexpected(Throwable x, String requestId) {
        String name = x.getClass().getSimpleName();
        if (unexpectedLogged.add(x.getClass())) {
            LOG.error("dspark-vllm: request {}: unexpected {} while handling the response", requestId, name, x);
        } else {
            LOG.debug("dspark-vllm: request {}: unexpected {} while handling the response", requestId, name, x);
        }
        return Failure.unexpected(x);
    }

    /** Starts spaced 1/rate apart, no burst beyond one; retries take slots too. */
    private static final class RateLimit {
        private final long intervalNs;
        private long next = Long.MIN_VALUE;

        RateLimit(double rate) {
            this.intervalNs = (long) (1e9 / rate);
        }

        synchronized long reserveNs() {
            long now = System.nanoTime();
            long slot = next == Long.MIN_VALUE ? now : Math.max(now, next);
            next = slot + intervalNs;
            return slot - now;
        }
    }
}
