package io.dspark.vllm.sql;

import io.dspark.vllm.engine.Engine;
import io.dspark.vllm.request.RequestSpec;

import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.flink.table.catalog.ObjectIdentifier;

import java.nio.file.Files;
import java.nio.file.Paths;

/**
 * The Java side of the planner's contract (tests/test_java_contract.py): reads plans that the Python planner
 * made and prints, as one JSON object, what the jar understood of them, for the test to hold against the
 * plan; and checks that a plan or a request spec of another version, or other request columns, is refused.
 *
 * <pre>java ... io.dspark.vllm.engine.ContractCheck PLAN.json ...</pre>  (one line of JSON per plan)
 */
public final class ContractCheck {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final ObjectIdentifier T = ObjectIdentifier.of("default_catalog", "default_database", "t");

    public static void main(String[] args) throws Exception {
        for (String path : args) {
            System.out.println(JSON.writeValueAsString(check(JSON.readTree(Files.readString(Paths.get(path))))));
        }
    }

    private static ObjectNode check(JsonNode plan) {
        ObjectNode out = JSON.createObjectNode();
        TablePlan table = new TablePlan(plan, T);
        out.put("mode", table.mode());
        out.put("bounded", table.bounded());
        out.set("parse_internal", JSON.valueToTree(table.parseInternal()));
        out.set("flat", JSON.valueToTree(table.flatTypes()));
        ArrayNode keys = out.putArray("option_keys");
        for (ConfigOption<?> option : new DsparkVllmTableFactory().optionalOptions()) {
            keys.add(option.key());
        }
        out.set("retired", JSON.valueToTree(TableOptions.RETIRED));
        if (table.request() != null) {
            JsonNode request = plan.get("request");
            RequestSpec spec = RequestSpec.of(table.request().client);
            ObjectNode s = out.putObject("spec");
            s.put("url", spec.url);
            s.put("health_url", spec.healthUrl);
            s.put("body", spec.body("\"PROMPT\""));
            s.put("timeout_s", spec.timeoutS);
            s.put("deadline_s", spec.deadlineS);
            s.put("max_attempts", spec.maxAttempts);
            s.put("rate_limit", spec.rateLimit);
            s.put("max_body_bytes", spec.maxBodyBytes);
            s.put("adaptive", spec.adaptive);
            s.put("concurrency", spec.concurrency);
            s.put("min", spec.minConcurrency);
            s.put("max", spec.maxConcurrency);
            s.put("tls_verify", spec.tlsVerify);
            s.put("to_string", spec.toString());
            s.set("headers", JSON.valueToTree(spec.headers));
            Engine.checkRequestColumns(table.request().columns);
            out.put("request_step", "accepted");
            out.put("wrong_columns", refused(() -> {
                ObjectNode changed = ((ObjectNode) plan).deepCopy();
                ((ArrayNode) changed.get("request").get("columns")).remove(0);
                Engine.checkRequestColumns(new TablePlan(changed, T).request().columns);
            }));
            out.put("spec_of_another_version", refused(() -> {
                ObjectNode changed = ((ObjectNode) request.get("client")).deepCopy();
                changed.put("version", RequestSpec.VERSION + 1);
                RequestSpec.fromJson(changed);
            }));
        }
        out.put("plan_of_another_version", refused(() -> {
            ObjectNode changed = ((ObjectNode) plan).deepCopy();
            changed.put("version", TablePlan.VERSION + 1);
            new TablePlan(changed, T);
        }));
        // The generated reader: a key it does not know, one it needs and lacks, a value of another type.
        out.put("unknown_key", refused(() -> {
            ObjectNode changed = ((ObjectNode) plan).deepCopy();
            ((ObjectNode) changed.get("native")).put("batch_sise", 8);
            new TablePlan(changed, T);
        }));
        out.put("missing_key", refused(() -> {
            ObjectNode changed = ((ObjectNode) plan).deepCopy();
            changed.remove("settings");
            new TablePlan(changed, T);
        }));
        out.put("wrong_type", refused(() -> {
            ObjectNode changed = ((ObjectNode) plan).deepCopy();
            changed.put("bounded", "yes");
            new TablePlan(changed, T);
        }));
        out.put("two_layouts", refused(() -> {
            ObjectNode changed = ((ObjectNode) plan).deepCopy();
            ((ObjectNode) changed.get("metadata").get(0).get("from")).put("answer", "x");
            new TablePlan(changed, T);
        }));
        return out;
    }

    private static String refused(Runnable check) {
        try {
            check.run();
            return "accepted";
        } catch (IllegalArgumentException e) {
            return e.getMessage();
        }
    }
}
