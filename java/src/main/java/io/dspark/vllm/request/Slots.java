package io.dspark.vllm.request;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Executor;
import java.util.function.LongConsumer;

/**
 * Attempts on the wire at once: at most {@link #limit()}; an attempt beyond waits in a FIFO queue (a callback,
 * never a thread). The limit is fixed, or adaptive: AIMD that remembers where it was last throttled (its
 * <i>plateau</i>) and only probes above it now and then, in the spirit of TCP CUBIC.
 *
 * <ul>
 *   <li><b>Windows.</b> The limit's completions form windows: a window ends after {@code floor(limit)}
 *       completions, about one round trip when the limit is reached. Each attempt carries the <i>epoch</i> its
 *       slot was given in; every decrease starts a new epoch, and a throttled answer to an attempt of an older
 *       epoch does not lower the limit again (at most one decrease per round trip).</li>
 *   <li><b>Decrease</b> when an attempt is answered 429 or 503, or times out after (nearly) its whole timeout
 *       (not one that its request's deadline cut short after it waited for a slot): x0.75, and the plateau becomes
 *       one below the level that was throttled. Two gentler cases: a throttled <i>probe</i> goes back to the
 *       plateau (which it had just shown to be fine), and a first throttle at the plateau after a calm stretch
 *       (4 windows) steps back by one; another throttle soon after is a full x0.75.</li>
 *   <li><b>Increase</b>, only after a window in which the limit held requests back (the queue was not empty)
 *       and nothing was throttled: +1 a window up to the plateau; at the plateau the limit waits
 *       {@code probeWait} windows (16, doubled by each throttled probe up to 32) and probes one above. A probe
 *       whose window passes raises the plateau and halves the wait, so a server that takes more is found
 *       quickly. Against a server that takes 16 at once and refuses the 17th, the limit sits at 16 and
 *       throttles about once per 32 windows: well under 1% of the attempts.</li>
 *   <li><b>Latency</b> (Vegas-like), for servers that queue instead of refusing: each window's mean round trip
 *       of its 2xx answers is compared with the lowest window mean seen (a baseline that drifts up 0.5% a
 *       window, so it follows a workload that got slower for good). Two windows in a row over 3x the baseline
 *       count as a queue building up in the server: x0.9; a slow window never raises the limit. Single
 *       answers are never compared: a completion's latency depends on its output length, a window's mean much
 *       less.</li>
 * </ul>
 *
 * <p>An adaptive limit starts at the spec's start divided among the parallel instances that send to the same
 * replica (see the constructor). Limits stay within [min, max]. A replica on probation ({@link Replicas}) is
 * capped at one attempt at a time whatever its limit ({@link #cap}). One lock guards it all; callbacks run on the
 * given executor, outside it.
 */
final class Slots {
    static final double DECREASE = 0.75;
    static final double LATENCY_DECREASE = 0.9;
    static final double LATENCY_FACTOR = 3.0;
    static final int LATENCY_WINDOWS = 2;
    static final double BASELINE_DRIFT = 1.005;
    static final int PROBE_WAIT_MIN = 16;
    static final int PROBE_WAIT_MAX = 32;
    static final int CALM_WINDOWS = 4;

    private final boolean adaptive;
    private final int min;
    private final int max;
    private final Executor executor;
    private final ArrayDeque<LongConsumer> waiting = new ArrayDeque<>();
    private int busy;
    private double limit;
    // AIMD state (guarded by this)
    private long epoch;
    private int plateau = Integer.MAX_VALUE;
    private int probeWait = PROBE_WAIT_MIN;
    private int windowsAtPlateau;
    private boolean probing;
    private int windowCount;
    private int windowOk;
    private double windowRttSum;
    private boolean windowBinding;
    private double baselineRtt = Double.NaN;
    private int slowWindows;
    private int calm; // windows since the last throttle that was not a probe's
    private int cap = Integer.MAX_VALUE; // a replica on probation: 1 (the limit learns on beneath it)
    /** For a benchmark's eyes only: each change of the adaptive limit, and why. */
    static volatile java.util.function.Consumer<String> trace;

    /**
     * {@code senders}: the parallel instances that send to this replica, each with its own Slots (a job's
     * subtasks). An adaptive limit starts at its share of the start, {@code ceil(start / senders)}: together they
     * start where one would, instead of {@code senders} times as many at once, which a server that takes about
     * the start answers with a burst of 429s, each waiting its Retry-After.
     */
    Slots(RequestSpec spec, Executor executor, int senders) {
        this.adaptive = spec.adaptive;
        this.min = Math.max(1, adaptive ? spec.minConcurrency : spec.concurrency);
        this.max = Math.max(min, adaptive ? spec.maxConcurrency : spec.concurrency);
        int n = Math.max(1, senders);
        int start = adaptive ? (spec.concurrency + n - 1) / n : spec.concurrency;
        this.limit = Math.max(min, Math.min(max, start));
        this.executor = executor;
    }

    /** Attempts allowed on the wire at once now: the limit, or the cap below it. */
    synchronized int limit() {
        return allowed();
    }

    private int current() {
        return Math.max(min, Math.min(max, (int) Math.floor(limit)));
    }

    private int allowed() {
        return Math.min(cap, current());
    }

    /**
     * At most {@code n} attempts at once whatever the limit (a replica on probation: 1), or, with
     * {@code Integer.MAX_VALUE}, the limit again. A cap that holds requests back is no reason to raise the limit.
     */
    synchronized void cap(int n) {
        cap = Math.max(1, n);
    }

    synchronized int busy() {
        return busy;
    }

    synchronized int queued() {
        return waiting.size();
    }

    /**
     * Run {@code then} once a slot is free (now, on this thread, if one is), with the epoch the slot was given
     * in: the attempt's epoch (see the class comment).
     */
    void acquire(LongConsumer then) {
        long granted;
        synchronized (this) {
            if (!waiting.isEmpty() || busy >= allowed()) {
                waiting.add(then);
                if (busy >= current()) {
                    windowBinding = true;
                }
                return;
            }
            busy++;
            if (busy >= current()) {
                windowBinding = true;
            }
            granted = epoch;
        }
        then.accept(granted);
    }

    /**
     * A slot now, without waiting: its epoch, or -1 when none is free (then the limit held a request back: the
     * window is binding). For {@link Replicas}, whose one queue waits for a slot of any replica.
     */
    synchronized long tryAcquire() {
        if (!waiting.isEmpty() || busy >= allowed()) {
            windowBinding |= cap == Integer.MAX_VALUE;
            return -1;
        }
        busy++;
        if (busy >= current()) {
            windowBinding = true;
        }
        return epoch;
    }

    /** Free slots now (the limit less the attempts on the wire; never below 0). */
    synchronized int room() {
        return Math.max(0, allowed() - busy);
    }

    /** Requests waited elsewhere while this limit was reached: the window is binding (not under a cap). */
    synchronized void binding() {
        windowBinding |= cap == Integer.MAX_VALUE;
    }

    void release() {
        List<Runnable> go;
        synchronized (this) {
            busy = Math.max(0, busy - 1);
            go = drain();
        }
        run(go);
    }

    private void run(List<Runnable> go) {
        for (Runnable r : go) {
            try {
                executor.execute(r);
            } catch (java.util.concurrent.RejectedExecutionException e) {
                // closed: the requests these belong to were ended by Requester.close()
            }
        }
    }

    /** Forget the callbacks still waiting (close: their requests are ended there). */
    synchronized void clear() {
        waiting.clear();
    }

    private List<Runnable> drain() {
        List<Runnable> go = new ArrayList<>();
        while (!waiting.isEmpty() && busy < allowed()) {
            busy++;
            LongConsumer next = waiting.poll();
            long granted = epoch;
            go.add(() -> next.accept(granted));
        }
        if (!waiting.isEmpty()) {
            windowBinding = true;
        }
        return go;
    }

    /**
     * One attempt ended: {@code throttled} (429, 503 or a timeout of its whole timeout), or {@code okRttMs} (the
     * round trip of a 2xx answer, else NaN). Called before the attempt's {@link #release()}, so that its slot goes
     * on under the new limit.
     */
    void onResult(long sentEpoch, boolean throttled, double okRttMs) {
        if (!adaptive) {
            return;
        }
        List<Runnable> go;
        synchronized (this) {
            if (throttled) {
                if (sentEpoch == epoch) {
                    if (probing) { // one above the plateau was too many: back to it, and probe less often
                        probeWait = Math.min(PROBE_WAIT_MAX, probeWait * 2);
                        lower(plateau, "probe throttled");
                    } else if (current() >= plateau && calm >= CALM_WINDOWS) { // once at a level that was fine
                        plateau = Math.max(min, current() - 1);
                        probeWait = PROBE_WAIT_MIN;
                        calm = 0;
                        lower(plateau, "throttled at the plateau");
                    } else {
                        plateau = Math.max(min, current() - 1);
                        probeWait = PROBE_WAIT_MIN;
                        calm = 0;
                        lower(limit * DECREASE, "throttled");
                    }
                }
                return;
            }
            windowCount++;
            if (!Double.isNaN(okRttMs)) {
                windowOk++;
                windowRttSum += okRttMs;
            }
            if (windowCount < current()) {
                return;
            }
            endWindow();
            go = drain();
        }
        run(go);
    }

    private void endWindow() {
        double mean = windowOk > 0 ? windowRttSum / windowOk : Double.NaN;
        boolean binding = windowBinding;
        resetWindow();
        calm++;
        if (!Double.isNaN(mean)) {
            baselineRtt = Double.isNaN(baselineRtt) ? mean : Math.min(mean, baselineRtt * BASELINE_DRIFT);
            boolean slow = mean > LATENCY_FACTOR * baselineRtt;
            slowWindows = slow ? slowWindows + 1 : 0;
            if (slowWindows >= LATENCY_WINDOWS) {
                slowWindows = 0;
                lower(limit * LATENCY_DECREASE, "latency " + Math.round(mean) + " ms > " + LATENCY_FACTOR + " x "
                        + Math.round(baselineRtt) + " ms");
                return;
            }
            if (slow) {
                return; // a slow window never raises the limit
            }
        }
        if (!binding) {
            return; // the limit was not what held requests back: nothing learnt about the server
        }
        if (probing) { // a whole window one above the old plateau, nothing throttled: the server takes more
            probing = false;
            plateau = current();
            probeWait = Math.max(1, probeWait / 2);
        }
        if (current() < plateau) {
            limit = Math.min(Math.min(limit + 1, plateau), max);
            windowsAtPlateau = 0;
            java.util.function.Consumer<String> t = trace;
            if (t != null) {
                t.accept(String.format(java.util.Locale.ROOT, "%.2f up (window mean %.1f ms, baseline %.1f ms)", limit,
                        mean, baselineRtt));
            }
        } else if (++windowsAtPlateau >= probeWait && current() < max) {
            limit = current() + 1;
            windowsAtPlateau = 0;
            probing = true;
            java.util.function.Consumer<String> t = trace;
            if (t != null) {
                t.accept(String.format(java.util.Locale.ROOT, "%.2f probe (plateau %d)", limit, plateau));
            }
        }
        limit = Math.max(min, Math.min(max, limit));
    }

    /** A new, lower limit; a new epoch starts (answers to attempts sent before do not lower it again). */
    private void lower(double to, String why) {
        limit = Math.max(min, to);
        java.util.function.Consumer<String> t = trace;
        if (t != null) {
            t.accept(String.format(java.util.Locale.ROOT, "%.2f %s (plateau %d, probe wait %d)", limit, why, plateau,
                    probeWait));
        }
        epoch++;
        probing = false;
        windowsAtPlateau = 0;
        resetWindow();
    }

    private void resetWindow() {
        windowCount = 0;
        windowOk = 0;
        windowRttSum = 0;
        windowBinding = false;
    }
}
