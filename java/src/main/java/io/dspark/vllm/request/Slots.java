package io.dspark.vllm.request;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Executor;

/**
 * Attempts on the wire at once: at most {@link #limit()}; an attempt beyond waits in a FIFO queue (a callback,
 * never a thread). The limit is fixed, or adaptive (AIMD with a remembered ceiling):
 *
 * <ul>
 *   <li><b>Decrease</b> (x0.75) when an attempt is answered 429 or 503, or times out. At most once per round
 *       trip: each attempt carries the epoch it was sent in, a decrease starts a new epoch, and a throttled
 *       answer to an attempt of an older epoch is not counted again. The level that was throttled,
 *       {@code floor(limit)}, is remembered: one below it is the <i>plateau</i>.</li>
 *   <li><b>Increase</b>: the limit's completions form windows (a window ends after {@code floor(limit)}
 *       completions). A window in which the limit was reached (the queue was not empty) and nothing was
 *       throttled adds 1, up to the plateau; at the plateau the limit waits {@code probeWait} windows (16 to
 *       32) before it tries one more. A probe that passes raises the plateau and halves the wait, so a server
 *       that got faster is found quickly; a throttled one doubles it (at most 32), so a server whose capacity
 *       is reached sees one 429 per ~30 windows (well under 1% of the attempts) while the limit stays one
 *       below that capacity. This is TCP CUBIC's idea (slow near the last loss, faster away from it), in
 *       steps.</li>
 *   <li><b>Latency</b> (Vegas-like): each window's mean round trip of the 2xx answers is compared with the
 *       lowest window mean seen (which drifts up 1% a window, so it follows a workload that got slower for
 *       good). A window whose mean is over 2.5x that baseline counts as a queue building up in the server:
 *       x0.9, and no increase. Single answers are not compared: a completion's latency depends on its output
 *       length, means over a window much less.</li>
 * </ul>
 *
 * Limits stay within [min, max]. One lock guards it all; callbacks run on the given executor, outside it.
 */
final class Slots {
    static final double DECREASE = 0.75;
    static final double LATENCY_DECREASE = 0.9;
    static final double LATENCY_FACTOR = 2.5;
    static final double BASELINE_DRIFT = 1.01;
    static final int PROBE_WAIT_MIN = 16;
    static final int PROBE_WAIT_MAX = 32;

    private final boolean adaptive;
    private final int min;
    private final int max;
    private final Executor executor;
    private final ArrayDeque<Runnable> waiting = new ArrayDeque<>();
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

    Slots(RequestSpec spec, Executor executor) {
        this.adaptive = spec.adaptive;
        this.min = Math.max(1, adaptive ? spec.minConcurrency : spec.concurrency);
        this.max = Math.max(min, adaptive ? spec.maxConcurrency : spec.concurrency);
        this.limit = Math.max(min, Math.min(max, spec.concurrency));
        this.executor = executor;
    }

    synchronized int limit() {
        return current();
    }

    private int current() {
        return Math.max(min, Math.min(max, (int) Math.floor(limit)));
    }

    synchronized int busy() {
        return busy;
    }

    synchronized int queued() {
        return waiting.size();
    }

    /** The epoch an attempt is sent in (see the class comment). */
    synchronized long epoch() {
        return epoch;
    }

    /** Run {@code then} once a slot is free (now, on this thread, if one is). */
    void acquire(Runnable then) {
        synchronized (this) {
            if (!waiting.isEmpty() || busy >= current()) {
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
        }
        then.run();
    }

    void release() {
        List<Runnable> go;
        synchronized (this) {
            busy--;
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

    /** The callbacks still waiting, taken out (for close). */
    synchronized List<Runnable> clear() {
        List<Runnable> all = new ArrayList<>(waiting);
        waiting.clear();
        return all;
    }

    private List<Runnable> drain() {
        List<Runnable> go = new ArrayList<>();
        while (!waiting.isEmpty() && busy < current()) {
            busy++;
            go.add(waiting.poll());
        }
        if (!waiting.isEmpty()) {
            windowBinding = true;
        }
        return go;
    }

    /**
     * One attempt ended: {@code throttled} (429, 503 or a timeout), or {@code okRttMs} (the round trip of a 2xx
     * answer, else NaN). Called after {@link #release()}.
     */
    void onResult(long sentEpoch, boolean throttled, double okRttMs) {
        if (!adaptive) {
            return;
        }
        List<Runnable> go;
        synchronized (this) {
            if (throttled) {
                if (sentEpoch == epoch) {
                    plateau = Math.max(min, current() - 1);
                    probeWait = probing ? Math.min(PROBE_WAIT_MAX, probeWait * 2) : PROBE_WAIT_MIN;
                    decrease(DECREASE);
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
        if (!Double.isNaN(mean)) {
            baselineRtt = Double.isNaN(baselineRtt) ? mean : Math.min(mean, baselineRtt * BASELINE_DRIFT);
            if (mean > LATENCY_FACTOR * baselineRtt) {
                decrease(LATENCY_DECREASE);
                return;
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
            limit = Math.min(limit + 1, plateau);
            windowsAtPlateau = 0;
        } else if (++windowsAtPlateau >= probeWait && current() < max) {
            limit = current() + 1;
            windowsAtPlateau = 0;
            probing = true;
        }
        limit = Math.max(min, Math.min(max, limit));
    }

    private void decrease(double factor) {
        limit = Math.max(min, limit * factor);
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
