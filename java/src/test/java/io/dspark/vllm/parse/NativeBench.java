package io.dspark.vllm.parse;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * The JVM's native parse alone, no Flink: bodies per CPU second through {@link NativeParser} in batches of
 * each given size (1: one call per body, as the format makes them), rounds taking turns; what the core reads is
 * the planner's for the profile's COLUMNS ({@link PythonPlan}: all it makes when empty).
 *
 * <pre>NativeBench PROFILE COLUMNS(comma-separated) BODIES_FILE(jsonl) ROUNDS BATCH...</pre>
 */
public final class NativeBench {

    public static void main(String[] args) throws Exception {
        String[] columns = args[1].isEmpty() ? new String[0] : args[1].split(",");
        List<byte[]> lines = new ArrayList<>();
        for (String line : Files.readAllLines(Paths.get(args[2]), StandardCharsets.UTF_8)) {
            lines.add(line.getBytes(StandardCharsets.UTF_8));
        }
        byte[][] bodies = lines.toArray(new byte[0][]);
        int rounds = Integer.parseInt(args[3]);
        NativeParser parser = new NativeParser(PythonPlan.of(args[0], columns));
        java.lang.management.ThreadMXBean cpu = java.lang.management.ManagementFactory.getThreadMXBean();
        for (int round = 0; round < rounds; round++) {
            for (int a = 4; a < args.length; a++) {
                int batch = Integer.parseInt(args[a]);
                long started = cpu.getCurrentThreadCpuTime();
                long rows = 0;
                for (int from = 0; from < bodies.length; from += batch) {
                    for (Map<String, ArrowColumn> part : parser.parse(bodies, from, Math.min(bodies.length, from + batch))) {
                        rows += part.get(NativeParser.REASON).length;
                    }
                }
                double seconds = (cpu.getCurrentThreadCpuTime() - started) / 1e9;
                System.out.printf("round %d batch %d: %d bodies, %.0f bodies per CPU second%n", round, batch, rows,
                        rows / seconds);
            }
        }
    }
}
