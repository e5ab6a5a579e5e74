package io.dspark.vllm.request;

import io.dspark.vllm.plan.PlanContract;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.net.Inet4Address;
import java.net.InetAddress;
import java.net.URI;
import java.net.UnknownHostException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;
import java.util.function.Function;

/**
 * The replicas a table's requests go to, and which one takes each attempt: the endpoint's base URLs, and for a
 * host name every address it resolves to (a headless Kubernetes Service names each pod's address), looked up
 * again every {@code resolve_interval_s}. Each replica has its own connections (the transport pools them per
 * address), its own {@link Slots} (a fixed limit, or AIMD on its own 429s and latency) and its own health.
 *
 * <p><b>Health.</b> With one replica, as with one server before: its {@link Gate} (only with
 * 'request.retry.hold-while-down') closes on a connect failure or a 502/503 and holds requests back. With
 * several, each has a gate whatever that option says, and a closed gate means <i>ejected</i>: it gets no attempts
 * while another is in; a connect failure (or a failed TLS handshake) ejects it at once, {@link #EJECT_AFTER} 5xx
 * answers, answers that are no HTTP, broken connections or timeouts of attempts that had (nearly) their whole
 * timeout on it ({@link #HUNG_SHARE}: a replica that hangs) in a row too; its {@code /health} is probed (backoff
 * steps up to 'request.retry.max-backoff') and an answer below 500 takes it back <i>on probation</i>: one attempt
 * at a time until it answers one (then its whole limit again), and one failure of those that count (of an attempt
 * sent since) ejects it again at once, its probes further apart (a /health that answers says little of
 * completions that hang or fail). While every replica is ejected, requests wait for one to come back
 * (hold-while-down), or go to the least loaded anyway.
 *
 * <p><b>Routing.</b> {@code least-loaded}: one FIFO queue for all replicas, where a request waits only while no
 * replica in has a free slot; it goes to the replica with the most free slots (ties: the fewest on the wire, then
 * in turn). {@code prefix}: the first {@code prefix_bytes} of the body after its fixed head (the messages, system
 * prompt first), or the request's own routing key where it has one (a model's 'request.routing.key-column': a user
 * or session id, whatever the body), choose the replica. While the keys seen in the last 2 minutes are few (at most
 * {@link #KEYS}), each replica in takes an even share of them (a prefix cache holds a number of heads: hashing 8
 * heads onto 2 replicas gives one of them 5 or more in 3 cases of 4), each key the first replica in its rendezvous
 * (highest random weight) order with room, the keys taking their turns in an order fixed by their hash: a function
 * of the keys and the replicas, so subtasks that saw the same keys agree, and a restarted job too. With more keys,
 * rendezvous hashing alone, which spreads many keys evenly. The request joins that replica's own queue (a full
 * replica keeps its heads: passing them to whichever has room would undo the routing under load), within a
 * bounded load: the replica takes it while it has a free slot, or its load (on the wire and queued) is at most
 * 'load_bound' (1.25) x the mean load (+1), or has been over that for less than {@link #SUSTAINED_NS}; a replica
 * that stays overloaded passes its newest waiting requests on to the next replica in their key's order that has a
 * free slot or a load within the bound. An ejected or gone replica's queue goes to the others.
 *
 * <p>Thread safety: one lock (this) guards the queue and the list; slots and gates have their own, never taken
 * while calling back. Grants run on the transport's event loop, outside any lock.
 */
public final class Replicas implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(Requester.class);
    /** 5xx answers, timeouts or broken connections in a row that eject a replica (one of several). */
    static final int EJECT_AFTER = 3;
    /**
     * A timeout counts toward an ejection when the attempt had at least this share of 'request.timeout' on the
     * replica: not one cut short by the request's deadline after it waited here (for a slot, in backoff), which
     * says more of this client's queue than of the replica. Not 1: where the deadline is shorter than the timeout
     * (ML_PREDICT's), an attempt sent at once has the deadline less the moments before it.
     */
    static final double HUNG_SHARE = 0.9;
    /**
     * 'prefix': the distinct routing keys balanced over the replicas; with more, the hash alone spreads them (until
     * they are half as many again: a number of keys near the limit does not switch back and forth).
     */
    static final int KEYS = 256;
    /** 'prefix': a key not seen for this long is no longer counted (its cache blocks are likely gone too). */
    static final long KEY_TTL_NS = TimeUnit.MINUTES.toNanos(2);
    /** 'prefix': how long a replica's load stays over the bound before its requests go to the next replica. */
    static final long SUSTAINED_NS = TimeUnit.SECONDS.toNanos(1);

    /** How a host name becomes addresses (tests give their own). */
    interface Resolver {
        InetAddress[] resolve(String host) throws UnknownHostException;
    }

    static final Resolver SYSTEM = InetAddress::getAllByName;

    /** One replica: a base URL, or one address of its host name. */
    public static final class Replica {
        final String name;
        final URI uri;
        final URI healthUri;
        final InetAddress address; // null: connect by the URI's host (an IP literal, or a name that did not resolve)
        final String target; // what a failure message names
        final long hash;
        final Slots slots;
        Gate gate; // null: none (one replica without hold-while-down); set once, before it is used
        final AtomicLong answers = new AtomicLong();
        final AtomicLong throttled = new AtomicLong();
        final Recent latencies = new Recent(1000);
        private int failuresInARow; // guarded by this
        private boolean probation; // taken back by a probe, not yet answered a request since (guarded by this)
        private long probationSinceNs; // (guarded by this)
        final ArrayDeque<Waiter> queue = new ArrayDeque<>(); // 'prefix': requests given to it (the Replicas' lock)
        long overSinceNs; // 'prefix': since when its load has been over the bound at every look (the Replicas' lock)
        boolean over; // (overSinceNs is set)
        volatile boolean removed;

        Replica(String name, URI uri, URI healthUri, InetAddress address, String target, Slots slots) {
            this.name = name;
            this.uri = uri;
            this.healthUri = healthUri;
            this.address = address;
            this.target = target;
            this.slots = slots;
            this.hash = fnv(name.getBytes(StandardCharsets.UTF_8), Integer.MAX_VALUE);
        }

        /** host:port, or host:port/address for an address of a name that is looked up. */
        public String name() {
            return name;
        }

        /** Attempts on the wire now. */
        public int inFlight() {
            return slots.busy();
        }

        /** Attempts it may have on the wire at once now. */
        public int limit() {
            return slots.limit();
        }

        /** Whether it gets no requests now (it looked down and has not answered since). */
        public boolean ejected() {
            Gate g = gate;
            return g != null && !g.isOpen();
        }

        /** Attempts it answered with a 2xx. */
        public long answers() {
            return answers.get();
        }

        /** Attempts it answered 429 or 503. */
        public long throttled() {
            return throttled.get();
        }

        /** Median latency of its recent 2xx answers, ms. */
        public double latencyMs(double percentile) {
            return latencies.percentile(percentile);
        }

        boolean in() {
            return !removed && !ejected();
        }

        @Override
        public String toString() {
            return name;
        }
    }

    /** A request waiting for a slot: its routing key's hash (or none), a replica to avoid, what to do then. */
    static final class Waiter {
        final long keyHash;
        final boolean keyed;
        final Replica avoid;
        final Grant then;

        Waiter(boolean keyed, long keyHash, Replica avoid, Grant then) {
            this.keyed = keyed;
            this.keyHash = keyHash;
            this.avoid = avoid;
            this.then = then;
        }
    }

    interface Grant {
        void go(Replica replica, long epoch);
    }

    /** 'prefix': a routing key seen recently, and the replica its requests go to. */
    private static final class Key {
        final long hash;
        final long order; // its place in the order in which keys choose (the same in every subtask)
        Replica home;
        long seenNs;

        Key(long hash) {
            this.hash = hash;
            this.order = mix(hash);
        }
    }

    private final RequestSpec spec;
    private final int senders; // the parallel instances that send to the same replicas (see Slots)
    private final Executor executor;
    private final ScheduledExecutorService timer;
    private final Resolver resolver;
    private final Function<Replica, CompletableFuture<Boolean>> probe;
    private final boolean prefix;
    private final boolean healthEach; // a gate for each replica (more than one URL, or a name that may resolve to more)
    private final ArrayDeque<Waiter> waiting = new ArrayDeque<>();
    private final List<Gate.Waiter> holds = new ArrayList<>();
    private final AtomicInteger turn = new AtomicInteger();
    private final List<Consumer<Replica>> added = new java.util.concurrent.CopyOnWriteArrayList<>();
    private final ScheduledThreadPoolExecutor resolving;
    private final Random random = new Random();
    // 'prefix': the keys seen recently, least recently seen first, and the replicas they were balanced over
    private final LinkedHashMap<Long, Key> keys = new LinkedHashMap<>(64, 0.75f, true);
    private Replica[] balancedOver = new Replica[0];
    private boolean hashing; // more keys than KEYS came: by hash alone
    private volatile Replica[] all; // in; ejected ones too; not the removed ones
    private volatile boolean closed;

    Replicas(RequestSpec spec, Executor executor, ScheduledExecutorService timer, Resolver resolver,
            Function<Replica, CompletableFuture<Boolean>> probe, String threadName, int senders) {
        this.spec = spec;
        this.senders = senders;
        this.executor = executor;
        this.timer = timer;
        this.resolver = resolver;
        this.probe = probe;
        this.prefix = "prefix".equals(spec.routing);
        boolean names = false;
        for (String url : spec.urls) {
            names |= resolves(URI.create(url).getHost());
        }
        boolean resolve = names && spec.resolveIntervalS > 0;
        this.healthEach = spec.urls.size() > 1 || resolve;
        this.all = build(resolve ? lookUp() : null, new Replica[0]);
        if (resolve) {
            ScheduledThreadPoolExecutor t = new ScheduledThreadPoolExecutor(1, r -> {
                Thread th = new Thread(r, threadName);
                th.setDaemon(true);
                return th;
            });
            long every = (long) (spec.resolveIntervalS * 1e9);
            t.scheduleWithFixedDelay(this::refresh, every, every, TimeUnit.NANOSECONDS);
            this.resolving = t;
        } else {
            this.resolving = null;
        }
    }

    /** Whether a URI's host is a name to look up (not an IP literal). */
    static boolean resolves(String host) {
        if (host == null || host.startsWith("[") || host.indexOf(':') >= 0) {
            return false;
        }
        return !host.matches("[0-9.]+");
    }

    /** The replicas now (ejected ones included). */
    List<Replica> list() {
        return List.of(all);
    }

    /** Called with each replica as it appears (now: with each one there is). */
    void onAdded(Consumer<Replica> c) {
        added.add(c);
        for (Replica r : all) {
            c.accept(r);
        }
    }

    /** Whether there are several replicas now. */
    boolean several() {
        return all.length > 1;
    }

    // --- the list --------------------------------------------------------------------------

    /** Each URL's addresses: null for a URL whose host is not looked up or did not resolve. */
    private List<InetAddress[]> lookUp() {
        List<InetAddress[]> out = new ArrayList<>();
        for (String url : spec.urls) {
            String host = URI.create(url).getHost();
            InetAddress[] found = null;
            if (resolves(host)) {
                try {
                    found = preferred(resolver.resolve(host));
                } catch (UnknownHostException | RuntimeException e) {
                    found = null;
                }
            }
            out.add(found);
        }
        return out;
    }

    /**
     * The addresses a plain connect would choose among: IPv4 ones where there are any (the JDK's preference,
     * unless java.net.preferIPv6Addresses says otherwise), else the others; in a stable order.
     */
    static InetAddress[] preferred(InetAddress[] addresses) {
        if (addresses == null || addresses.length == 0) {
            return null;
        }
        boolean v6 = Boolean.getBoolean("java.net.preferIPv6Addresses");
        List<InetAddress> chosen = new ArrayList<>();
        for (InetAddress a : addresses) {
            if ((a instanceof Inet4Address) != v6) {
                chosen.add(a);
            }
        }
        if (chosen.isEmpty()) {
            chosen.addAll(Arrays.asList(addresses));
        }
        chosen.sort((a, b) -> a.getHostAddress().compareTo(b.getHostAddress()));
        return chosen.stream().distinct().toArray(InetAddress[]::new);
    }

    /** The replicas for {@code addresses} (see {@link #lookUp}), keeping those of {@code before} that stay. */
    private Replica[] build(List<InetAddress[]> addresses, Replica[] before) {
        Map<String, Replica> kept = new LinkedHashMap<>();
        for (Replica r : before) {
            kept.put(r.name + " " + r.uri, r);
        }
        List<Replica> out = new ArrayList<>();
        Map<String, Integer> onHostPort = new java.util.HashMap<>();
        for (String url : spec.urls) {
            onHostPort.merge(hostPort(uri(url, "url")), 1, Integer::sum);
        }
        for (int i = 0; i < spec.urls.size(); i++) {
            URI uri = uri(spec.urls.get(i), "url");
            URI health = uri(spec.healthUrls.get(i), "health_url");
            String hostPort = hostPort(uri);
            if (onHostPort.get(hostPort) > 1) { // base URLs that differ in their path only (a gateway's routes)
                hostPort += rootPath(health);
            }
            InetAddress[] found = addresses == null ? null : addresses.get(i);
            if (found == null) {
                Replica old = kept.get(hostPort + " " + uri);
                out.add(old != null && old.address == null ? old
                        : replica(hostPort, uri, health, null, hostPort, spec.urls.size() > 1));
                continue;
            }
            for (InetAddress a : found) {
                String name = hostPort + "/" + a.getHostAddress(); // stable while the address stays
                Replica old = kept.get(name + " " + uri);
                boolean one = found.length == 1 && spec.urls.size() == 1;
                out.add(old != null && old.address != null && old.address.equals(a) ? old
                        : replica(name, uri, health, a, found.length == 1 ? hostPort : name, !one));
            }
        }
        return out.toArray(new Replica[0]);
    }

    private static String hostPort(URI uri) {
        return uri.getHost() + ":" + Transport.port(uri);
    }

    /** The base URL's path: the health URL's, less its "/health". */
    private static String rootPath(URI health) {
        String path = health.getRawPath() == null ? "" : health.getRawPath();
        return path.endsWith("/health") ? path.substring(0, path.length() - "/health".length()) : path;
    }

    /** {@code labelled}: its log lines name it (one of several). */
    private Replica replica(String name, URI uri, URI health, InetAddress address, String target,
            boolean labelled) {
        Replica r = new Replica(name, uri, health, address, target, new Slots(spec, executor, senders));
        if (healthEach || spec.holdWhileDown) {
            Gate g = new Gate(() -> probe.apply(r), timer, spec.backoffInitialS, spec.backoffMaxS, random,
                    labelled ? name : null);
            g.onOpen(this::readmitted);
            g.onProbed(() -> probation(r));
            r.gate = g;
        }
        return r;
    }

    static URI uri(String url, String what) {
        try {
            URI u = URI.create(url);
            if (u.getHost() == null || !("http".equalsIgnoreCase(u.getScheme())
                    || "https".equalsIgnoreCase(u.getScheme()))) {
                throw new IllegalArgumentException("not an http(s) URL with a host");
            }
            return u;
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("dspark-vllm: the request spec's " + what + " '" + url
                    + "' is not usable: " + e.getMessage() + "; check the table's 'endpoint'", e);
        }
    }

    /** The names are looked up again: new addresses become replicas, gone ones are removed (their attempts end). */
    void refresh() {
        if (closed) {
            return;
        }
        try {
            List<InetAddress[]> found = lookUp();
            Replica[] before = all;
            Replica[] now;
            synchronized (this) {
                // a name that did not resolve this time keeps what it had
                for (int i = 0; i < found.size(); i++) {
                    if (found.get(i) == null && resolves(URI.create(spec.urls.get(i)).getHost())) {
                        List<InetAddress> kept = new ArrayList<>();
                        for (Replica r : before) {
                            if (r.address != null && r.uri.toString().equals(spec.urls.get(i))) {
                                kept.add(r.address);
                            }
                        }
                        found.set(i, kept.isEmpty() ? null : kept.toArray(new InetAddress[0]));
                    }
                }
                now = build(found, before);
                all = now;
            }
            List<Replica> fresh = new ArrayList<>(Arrays.asList(now));
            fresh.removeAll(Arrays.asList(before));
            List<Replica> gone = new ArrayList<>(Arrays.asList(before));
            gone.removeAll(Arrays.asList(now));
            synchronized (this) {
                for (Replica r : gone) {
                    waiting.addAll(r.queue); // given to the others by the next drain
                    r.queue.clear();
                }
            }
            for (Replica r : gone) {
                r.removed = true;
                if (r.gate != null) {
                    r.gate.shutdown();
                }
                LOG.info("dspark-vllm: replica {} is gone from its name's addresses", r.name);
            }
            for (Replica r : fresh) {
                LOG.info("dspark-vllm: replica {} joins", r.name);
                for (Consumer<Replica> c : added) {
                    c.accept(r);
                }
            }
            if (!fresh.isEmpty() || !gone.isEmpty()) {
                readmitted(); // (and the requests given to a gone one go to the others)
            }
        } catch (RuntimeException e) {
            LOG.warn("dspark-vllm: looking up the replicas' addresses failed; trying again later", e);
        }
    }

    // --- health ----------------------------------------------------------------------------

    /** Whether any replica is in (not ejected). */
    boolean anyIn() {
        for (Replica r : all) {
            if (r.in()) {
                return true;
            }
        }
        return false;
    }

    /** Whether a replica other than {@code r} is in. */
    boolean anotherIn(Replica r) {
        for (Replica x : all) {
            if (x != r && x.in()) {
                return true;
            }
        }
        return false;
    }

    /** Why the replicas look down (the latest reason of one ejected), or null. */
    Failure reason() {
        for (Replica r : all) {
            if (r.gate != null && !r.gate.isOpen() && r.gate.reason() != null) {
                return r.gate.reason();
            }
        }
        return null;
    }

    /** Whether requests wait while no replica is in (hold-while-down). */
    boolean holds() {
        return spec.holdWhileDown;
    }

    /**
     * What one attempt on {@code r}, sent at {@code sentNs} (System.nanoTime), says of its health; {@code hung}: it
     * timed out after (nearly) its whole timeout on the replica (see {@link #HUNG_SHARE}). One replica: as the one
     * server's gate (connect failure or 502/503 closes it, any other answer opens it). Several: see the class
     * comment; on probation, a failure of an attempt sent before it began says nothing of the replica since.
     */
    void judge(Replica r, Integer status, Failure f, boolean hung, long sentNs) {
        Gate g = r.gate;
        if (g == null) {
            return;
        }
        if (!several()) {
            boolean down = f != null && (f.kind.equals(PlanContract.CONNECT)
                    || (status != null && (status == 502 || status == 503)));
            if (down) {
                g.close(f);
            } else if (status != null) {
                g.open();
            }
            return;
        }
        // No connection or no TLS session: this replica cannot answer any request now. An answer that is no HTTP
        // counts toward the failures in a row instead: one odd answer from a healthy server must not eject it.
        boolean connect = f != null && (f.kind.equals(PlanContract.CONNECT) || f.kind.equals(PlanContract.TLS));
        boolean bad = hung || replicasOwn(status, f);
        boolean eject;
        boolean onProbation;
        boolean cleared = false;
        synchronized (r) {
            if (r.probation && f != null && sentNs - r.probationSinceNs < 0) {
                return; // sent while it was down (a replica that came back may never answer what it held then)
            }
            r.failuresInARow = bad ? r.failuresInARow + 1 : status != null ? 0 : r.failuresInARow;
            eject = connect || (bad && (r.failuresInARow >= EJECT_AFTER || r.probation));
            if (r.probation && f == null) { // it answered a completion: its probation ends
                r.probation = false;
                cleared = true;
            }
            onProbation = r.probation;
        }
        if (cleared) {
            r.slots.cap(Integer.MAX_VALUE);
        }
        if (eject) {
            g.close(f);
            drain(); // requests given to it go to the others
        } else if (status != null && !bad && !onProbation) {
            g.open(); // (on probation, only a completion answered resets its probes' backoff)
            if (cleared) {
                drain(); // its whole limit again
            }
        }
    }

    /**
     * A probe took {@code r} back (its gate's lock is held): one of several goes on probation, one attempt at a
     * time until one is answered; a failure that counts toward an ejection ejects it again at once. A replica whose
     * /health answers while its completions hang (or fail) costs then one request per probe, the probes further
     * apart each time, not its whole limit of requests each time it comes back.
     */
    private void probation(Replica r) {
        if (!several()) {
            return; // one server: nowhere else to send; its gate holds requests back, it does not eject
        }
        synchronized (r) {
            r.probation = true;
            r.probationSinceNs = System.nanoTime();
            r.failuresInARow = 0;
        }
        r.slots.cap(1);
    }

    /**
     * A failure on {@code r} that another replica may not share (retried there at once, not after a backoff);
     * {@code hung}: a timeout that counts against the replica (see {@link #judge}).
     */
    boolean replicaFault(Integer status, Failure f, boolean hung) {
        return several() && (hung || replicasOwn(status, f));
    }

    /**
     * A failure of the replica rather than of the request: no connection, no TLS session, no valid HTTP, a 5xx, a
     * connection broken before the answer's head.
     */
    private static boolean replicasOwn(Integer status, Failure f) {
        return f != null && (f.kind.equals(PlanContract.CONNECT) || f.kind.equals(PlanContract.TLS)
                || f.kind.equals(PlanContract.PROTOCOL) || (status != null && status >= 500)
                || (status == null && f.kind.equals(PlanContract.STREAM)));
    }

    /**
     * 'least-loaded': whether another replica than {@code r} is in and has a free slot now, with no request
     * waiting for one: a request that {@code r} answered 429 goes there at once instead of waiting out {@code r}'s
     * Retry-After.
     */
    synchronized boolean roomElsewhere(Replica r) {
        if (prefix || !waiting.isEmpty()) { // ('prefix': the request waits for its own replica, as on arrival)
            return false;
        }
        for (Replica x : all) {
            if (x != r && x.in() && x.slots.room() > 0) {
                return true;
            }
        }
        return false;
    }

    /** Call {@code then} with true once a replica is in, or with false after {@code timeoutS}. */
    void awaitIn(double timeoutS, Consumer<Boolean> then) {
        Gate.Waiter w = new Gate.Waiter(then);
        synchronized (this) {
            if (!anyIn() && timeoutS > 0 && !closed) {
                try {
                    w.timeout = timer.schedule(() -> {
                        synchronized (this) {
                            holds.remove(w);
                        }
                        w.fire(false);
                    }, (long) (timeoutS * 1e9), TimeUnit.NANOSECONDS);
                    holds.add(w);
                    return;
                } catch (java.util.concurrent.RejectedExecutionException e) {
                    // closed: answer at once (the requester ends its requests itself)
                }
            }
        }
        w.fire(anyIn());
    }

    private void readmitted() {
        List<Gate.Waiter> go;
        synchronized (this) {
            go = new ArrayList<>(holds);
            holds.clear();
        }
        for (Gate.Waiter w : go) {
            w.fire(true);
        }
        drain();
    }

    // --- routing ---------------------------------------------------------------------------

    /**
     * The routing key's hash of a request: {@code key}'s (a model's 'request.routing.key-column': a user or session
     * id), or where that is null the body's first {@code prefix_bytes} after its fixed head.
     */
    long keyOf(byte[] body, byte[] key) {
        if (key != null) {
            return fnv(key, key.length);
        }
        int head = spec.bodyPrefix.getBytes(StandardCharsets.UTF_8).length;
        return fnv(body, (int) Math.min(Integer.MAX_VALUE, (long) head + spec.prefixBytes));
    }

    /** Whether requests are routed by a key ('prefix'). */
    boolean keyed() {
        return prefix;
    }

    static long fnv(byte[] bytes, int length) {
        long h = 0xcbf29ce484222325L;
        for (int i = 0, n = Math.min(length, bytes.length); i < n; i++) {
            h ^= bytes[i] & 0xff;
            h *= 0x100000001b3L;
        }
        return h;
    }

    /** A 64-bit mix (splitmix64's finaliser): the weight of a key on a replica. */
    static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
        z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
        return z ^ (z >>> 31);
    }

    /**
     * A slot on some replica for {@code w}: now (on this thread) or once one is free. 'least-loaded': in FIFO order
     * over all replicas. 'prefix': the request is given its replica now (see {@link #assign}) and waits in that
     * replica's own queue, so that a busy replica keeps its heads instead of passing them to whichever has room.
     */
    void acquire(Waiter w) {
        if (prefix && w.keyed) {
            synchronized (this) {
                waiting.add(w);
            }
            drain();
            return;
        }
        Replica chosen = null;
        long epoch = -1;
        synchronized (this) {
            if (waiting.isEmpty()) {
                chosen = choose(w);
                if (chosen != null) {
                    epoch = chosen.slots.tryAcquire();
                }
            }
            if (epoch < 0) {
                waiting.add(w);
                for (Replica r : all) {
                    r.slots.binding();
                }
                chosen = null;
            }
        }
        if (chosen != null) {
            w.then.go(chosen, epoch);
        }
    }

    /** An attempt on {@code r} ended: its slot is free (after {@link Slots#onResult}). */
    void release(Replica r) {
        r.slots.release();
        drain();
    }

    /** Forget the requests still waiting (close: they are ended there). */
    synchronized void clear() {
        waiting.clear();
        for (Replica r : all) {
            r.queue.clear();
        }
    }

    /** Hands free slots to waiting requests (after a release, an ejection, a replica's return or arrival). */
    void drain() {
        List<Runnable> go = new ArrayList<>();
        synchronized (this) {
            if (prefix) {
                drainByKey(go);
            } else {
                drainInTurn(go);
            }
        }
        for (Runnable g : go) {
            try {
                executor.execute(g);
            } catch (java.util.concurrent.RejectedExecutionException e) {
                // closed: the requests these belong to were ended by Requester.close()
            }
        }
    }

    private void drainInTurn(List<Runnable> go) {
        while (!waiting.isEmpty()) {
            Waiter w = waiting.peek();
            Replica r = choose(w);
            if (r == null) {
                break;
            }
            long epoch = r.slots.tryAcquire();
            if (epoch < 0) {
                break;
            }
            waiting.poll();
            go.add(() -> w.then.go(r, epoch));
        }
        if (!waiting.isEmpty()) {
            for (Replica r : all) {
                r.slots.binding();
            }
        }
    }

    private void drainByKey(List<Runnable> go) {
        Replica[] list = all;
        boolean anyIn = anyIn();
        for (Replica r : list) { // an ejected replica's queue goes to the others
            if (anyIn && !r.in() && !r.queue.isEmpty()) {
                waiting.addAll(r.queue);
                r.queue.clear();
            }
        }
        while (!waiting.isEmpty()) {
            Waiter w = waiting.poll();
            Replica r = assign(w);
            if (r == null) {
                waiting.addFirst(w);
                break;
            }
            r.queue.add(w);
        }
        long now = System.nanoTime();
        for (Replica r : list) { // the newest requests waiting for one that stays overloaded go to the next
            for (int n = r.queue.size(); n > 0 && overloaded(r, now); n--) {
                Waiter w = r.queue.pollLast();
                Replica to = assign(w);
                if (to == null || to == r) {
                    r.queue.addLast(w);
                    break;
                }
                to.queue.add(w);
            }
        }
        for (Replica r : list) {
            while (!r.queue.isEmpty()) {
                long epoch = r.slots.tryAcquire();
                if (epoch < 0) {
                    r.slots.binding();
                    break;
                }
                Waiter w = r.queue.poll();
                go.add(() -> w.then.go(r, epoch));
            }
            if (r.queue.isEmpty()) {
                r.over = false; // nothing waits for it: an overload, if any, has ended
            }
        }
    }

    /** The replicas a request may go to now: those in (all, when none is), less the one to avoid. Under this lock. */
    private List<Replica> candidates(Waiter w) {
        Replica[] list = all;
        List<Replica> in = new ArrayList<>(list.length);
        for (Replica r : list) {
            if (r.in()) {
                in.add(r);
            }
        }
        if (in.isEmpty()) { // none in: the least loaded anyway (a request that waited here goes and learns)
            in.addAll(Arrays.asList(list));
        }
        if (w.avoid != null && in.size() > 1) {
            in.remove(w.avoid);
        }
        return in;
    }

    /** 'least-loaded': the replica for {@code w} now, or null when none has a free slot. Under this lock. */
    private Replica choose(Waiter w) {
        List<Replica> in = candidates(w);
        return in.isEmpty() ? null : leastLoaded(in);
    }

    private Replica leastLoaded(List<Replica> in) {
        int n = in.size();
        int start = Math.floorMod(turn.getAndIncrement(), n);
        Replica best = null;
        int bestRoom = 0;
        int bestBusy = 0;
        for (int i = 0; i < n; i++) {
            Replica r = in.get((start + i) % n);
            int room = r.slots.room();
            int busy = r.slots.busy();
            if (room > bestRoom || (room == bestRoom && room > 0 && busy < bestBusy)) {
                best = r;
                bestRoom = room;
                bestBusy = busy;
            }
        }
        return best;
    }

    /**
     * 'prefix': the replica whose queue {@code w} joins. Its key's replica ({@link #homeOf}) takes it while that
     * one has a free slot, or its load (attempts on the wire and requests queued for it) is within 'load_bound' x
     * the mean load (+1), or has been over it for less than {@link #SUSTAINED_NS}: a burst waits for its replica;
     * a replica that stays overloaded (slower than the others, or one key with most of the traffic) passes its
     * requests to the next in the key's order (highest random weight first), which takes them on the same terms.
     * Under this lock; null only when there is no replica.
     */
    private Replica assign(Waiter w) {
        Replica[] in = inNow();
        if (in.length == 0) {
            return null;
        }
        Replica home = homeOf(w.keyHash, in);
        List<Replica> order = new ArrayList<>(in.length);
        order.add(home);
        for (Replica r : byWeight(w.keyHash, in)) {
            if (r != home) {
                order.add(r);
            }
        }
        if (w.avoid != null && order.size() > 1) {
            order.remove(w.avoid);
        }
        long total = 0;
        for (Replica r : in) {
            total += load(r);
        }
        double bound = Math.ceil(spec.loadBound * (total + 1) / in.length);
        Replica first = order.get(0);
        if (first.slots.room() > first.queue.size()) {
            return first; // it sends the request at once
        }
        if (load(first) + 1 <= bound) {
            first.over = false;
            return first;
        }
        long now = System.nanoTime();
        if (!first.over) {
            first.over = true;
            first.overSinceNs = now;
        }
        if (now - first.overSinceNs < SUSTAINED_NS) {
            return first;
        }
        for (Replica r : order.subList(1, order.size())) {
            if (r.slots.room() > r.queue.size() || load(r) + 1 <= bound) {
                return r;
            }
        }
        return first;
    }

    /** Whether {@code r}'s load has been over the bound for {@link #SUSTAINED_NS}. */
    private static boolean overloaded(Replica r, long now) {
        return r.over && now - r.overSinceNs >= SUSTAINED_NS;
    }

    /** The replicas requests may go to now: those in, or all when none is. Under this lock. */
    private Replica[] inNow() {
        Replica[] list = all;
        List<Replica> in = new ArrayList<>(list.length);
        for (Replica r : list) {
            if (r.in()) {
                in.add(r);
            }
        }
        return in.isEmpty() ? list : in.toArray(new Replica[0]);
    }

    /** {@code in} in the order of a key's weight on each (rendezvous hashing), highest first. */
    private static List<Replica> byWeight(long keyHash, Replica[] in) {
        List<Replica> order = new ArrayList<>(Arrays.asList(in));
        order.sort((a, b) -> Long.compareUnsigned(mix(keyHash ^ b.hash), mix(keyHash ^ a.hash)));
        return order;
    }

    /**
     * 'prefix': the replica of a key. Hashing alone gives few keys unevenly (8 heads over 2 replicas: 4 and 4 in
     * about a quarter of the cases), and a replica with more heads than its prefix cache holds loses them all. So
     * while the keys seen in the last {@link #KEY_TTL_NS} are at most {@link #KEYS}, each replica in takes at most
     * its share of them (rounded up): the keys, in an order fixed by their hash, each take the first replica in
     * their own order (highest random weight) that has room. Where a key goes is then a function of the keys
     * seen and the replicas in, so subtasks that saw the same keys agree, and a replica that comes back gets its
     * keys back. With more keys, the hash alone spreads them evenly. Under this lock.
     */
    private Replica homeOf(long keyHash, Replica[] in) {
        long now = System.nanoTime();
        boolean changed = !Arrays.equals(in, balancedOver);
        Key k = keys.get(keyHash); // (seen now: the most recent)
        if (k == null) {
            for (var it = keys.values().iterator(); it.hasNext(); ) {
                if (now - it.next().seenNs <= KEY_TTL_NS) {
                    break; // the rest were seen later
                }
                it.remove();
            }
            if (keys.size() >= KEYS) {
                var eldest = keys.keySet().iterator();
                eldest.next();
                eldest.remove();
                changed |= !hashing;
                hashing = true;
            } else if (hashing && keys.size() < KEYS / 2) {
                hashing = false;
                changed = true;
            }
            k = new Key(keyHash);
            keys.put(keyHash, k);
            if (hashing && !changed) {
                k.home = byWeight(keyHash, in).get(0);
            } else {
                changed = true;
            }
        }
        k.seenNs = now;
        if (changed) {
            balance(in);
        }
        return k.home;
    }

    private void balance(Replica[] in) {
        balancedOver = in;
        if (hashing) {
            for (Key k : keys.values()) {
                k.home = byWeight(k.hash, in).get(0);
            }
            return;
        }
        List<Key> list = new ArrayList<>(keys.values());
        list.sort((a, b) -> Long.compareUnsigned(a.order, b.order));
        int share = (list.size() + in.length - 1) / in.length;
        Map<Replica, Integer> taken = new java.util.HashMap<>();
        for (Key k : list) {
            for (Replica r : byWeight(k.hash, in)) {
                if (taken.getOrDefault(r, 0) < share) {
                    k.home = r;
                    taken.merge(r, 1, Integer::sum);
                    break;
                }
            }
        }
    }

    private static long load(Replica r) {
        return r.slots.busy() + r.queue.size();
    }

    @Override
    public void close() {
        closed = true;
        if (resolving != null) {
            resolving.shutdownNow();
        }
        for (Replica r : all) {
            if (r.gate != null) {
                r.gate.shutdown();
            }
        }
        synchronized (this) {
            waiting.clear();
            holds.clear();
            for (Replica r : all) {
                r.queue.clear();
            }
        }
    }
}
