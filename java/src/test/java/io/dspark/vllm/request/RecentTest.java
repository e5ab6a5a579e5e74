package io.dspark.vllm.request;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;

import java.nio.file.Files;
import java.nio.file.Path;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Recent percentiles ({@link Recent}): the shared cases of tests/data/percentiles.json, which Python's
 * connector.flink.metrics.Recent (the Python parse function's gauges) runs too (tests/test_percentiles.py).
 */
final class RecentTest {

    @Test
    void theSharedCases() throws Exception {
        Path file = null;
        for (Path dir = Path.of("").toAbsolutePath(); dir != null && file == null; dir = dir.getParent()) {
            Path candidate = dir.resolve("tests").resolve("data").resolve("percentiles.json");
            file = Files.isRegularFile(candidate) ? candidate : null;
        }
        assertNotNull(file, "tests/data/percentiles.json not found above the working directory");
        JsonNode cases = new ObjectMapper().readTree(file.toFile()).get("cases");
        assertTrue(cases.size() >= 5);
        for (JsonNode c : cases) {
            Recent recent = new Recent(c.get("capacity").asInt());
            for (JsonNode v : c.get("values")) {
                recent.add(v.asDouble());
            }
            for (JsonNode p : c.get("percentiles")) {
                assertEquals(p.get(1).asDouble(), recent.percentile(p.get(0).asDouble()),
                        c.get("name").asText() + ", p" + p.get(0).asText());
            }
        }
    }
}
