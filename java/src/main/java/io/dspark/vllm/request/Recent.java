package io.dspark.vllm.request;

import java.util.Arrays;

/**
 * The latest values of a measure (latencies, parse times), for percentiles (nearest rank): a ring of a fixed size.
 * Python's parse function keeps its own (connector.flink.metrics.Recent, in its worker); both are held to the
 * cases of tests/data/percentiles.json.
 */
public final class Recent {
    private final double[] values;
    private int next;
    private int size;

    public Recent(int capacity) {
        values = new double[capacity];
    }

    public synchronized void add(double value) {
        values[next] = value;
        next = (next + 1) % values.length;
        size = Math.min(size + 1, values.length);
    }

    public synchronized double percentile(double p) {
        if (size == 0) {
            return 0.0;
        }
        double[] sorted = Arrays.copyOf(values, size);
        Arrays.sort(sorted);
        int index = (int) Math.ceil(p / 100.0 * size) - 1;
        return sorted[Math.max(0, Math.min(size - 1, index))];
    }
}
