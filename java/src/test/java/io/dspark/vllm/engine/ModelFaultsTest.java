package io.dspark.vllm.engine;

import io.dspark.vllm.request.Outcome;
import io.dspark.vllm.request.Requester;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.table.api.ValidationException;
import org.apache.flink.table.data.DecimalData;
import org.apache.flink.table.data.GenericArrayData;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.types.logical.RowType;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A model's hostile rows and what a person reads of its failures: a row that is no request never failing the job, a deadline that fits ML_PREDICT's
 * timeout, a row's body value held to its option's rule.
 */
final class ModelFaultsTest {

    @Test
    void aRowThatCannotBeMadeARequestNeverFailsTheJob() {
        Outcome notSent = Requester.notSent("the prompt is NULL (INPUT column 'q')");
        assertFalse(notSent.failedForGood(), "a row's own fault is its error row");
        Outcome timedOut = new Outcome(null, null, 3.0, 1, "timeout: no complete response within 1 s", "timeout", 0L);
        assertTrue(timedOut.failedForGood());
        assertFalse(new Outcome(new byte[0], 200, 3.0, 1, null, null, 0L).failedForGood());
    }

    @Test
    void theModelsDeadlineEndsInsideMlPredictsTimeoutWithAMarginThatScales() {
        assertEquals(175.0, ModelPredictFunction.deadlineS(180_000), 1e-9); // 5 s before 3 min
        double five = ModelPredictFunction.deadlineS(5_000);
        assertTrue(five >= 3.5 && five <= 4.5, "a 5 s timeout leaves a deadline of seconds: " + five);
        assertEquals(1.6, ModelPredictFunction.deadlineS(2_000), 1e-9);
        ValidationException e = assertThrows(ValidationException.class, () -> ModelPredictFunction.deadlineS(1_999));
        assertEquals("dspark-vllm: ML_PREDICT's 'timeout' of 1.999 s is too short for a request to the model: set "
                + "MAP['timeout', '2 s'] or more in ML_PREDICT (or 'table.exec.async-ml-predict.timeout'; the model "
                + "ends each request at 4/5 of it, at most 5 s before it)",
                e.getMessage());
    }

    @Test
    void aRowsBodyValueIsHeldToItsOptionsRule() throws Exception {
        // the rules as connector.params writes them into the plan (RequestParam.as_rule)
        io.dspark.vllm.plan.Plan.Rule temperature =
                new io.dspark.vllm.plan.Plan.Rule("float", "a number >= 0", 0.0, null, false, false);
        io.dspark.vllm.plan.Plan.Rule topP =
                new io.dspark.vllm.plan.Plan.Rule("float", "a number in (0, 1]", 0.0, 1.0, true, false);
        io.dspark.vllm.plan.Plan.Rule stop =
                new io.dspark.vllm.plan.Plan.Rule("list[str]", "a list of non-empty strings", null, null, false, false);
        assertEquals("-3.5", ModelPredictFunction.Prompt.invalid(-3.5, temperature));
        assertEquals("NaN", ModelPredictFunction.Prompt.invalid(Double.NaN, temperature));
        assertEquals("Infinity", ModelPredictFunction.Prompt.invalid(Double.POSITIVE_INFINITY, temperature));
        assertEquals(null, ModelPredictFunction.Prompt.invalid(0.0, temperature));
        assertEquals("0", ModelPredictFunction.Prompt.invalid(0L, topP));
        assertEquals(null, ModelPredictFunction.Prompt.invalid(1, topP));
        assertEquals("1.01", ModelPredictFunction.Prompt.invalid(
                DecimalData.fromBigDecimal(new java.math.BigDecimal("1.010"), 4, 3), topP));
        assertEquals("a list with an empty string", ModelPredictFunction.Prompt.invalid(
                new GenericArrayData(new Object[] {StringData.fromString("END"), StringData.fromString("")}), stop));
        assertEquals("a list with a NULL", ModelPredictFunction.Prompt.invalid(
                new GenericArrayData(new Object[] {null}), stop));
        assertEquals(null, ModelPredictFunction.Prompt.invalid(
                new GenericArrayData(new Object[] {StringData.fromString("END")}), stop));
        assertEquals(null, ModelPredictFunction.Prompt.invalid("any model", null));
    }

    /** The model's plan from the Python planner (connector.plan.model.model_plan) for one INPUT column. */
    private static JsonNode modelPlan(String inputJson) throws Exception {
        return modelPlan(inputJson, "", "");
    }

    /** The same, with more options (Python dict items) and OUTPUT columns (Python dicts) than the error's. */
    private static JsonNode modelPlan(String inputJson, String options, String outputs) throws Exception {
        String python = System.getProperty("dspark.python", "python3");
        Process p = new ProcessBuilder(python, "-c", String.join("\n",
                "import json, sys",
                "from connector.plan.model import model_plan",
                "declared = {'model': 'm', 'options': {'provider': 'dspark-vllm', 'endpoint': 'http://127.0.0.1:9',",
                "            'model': 'm'" + (options.isEmpty() ? "" : ", " + options) + "},",
                "            'input': json.loads(sys.argv[1]),",
                "            'output': [{'name': 'error.reason', 'type': {'sql': 'STRING', 'root': 'VARCHAR'}}"
                        + (outputs.isEmpty() ? "" : ", " + outputs) + "]}",
                "print(json.dumps(model_plan(declared)))"), inputJson).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
        assertEquals(0, p.waitFor(), out);
        return new ObjectMapper().readTree(out);
    }

    /**
     * 'prefix' routing keys a request by its body's first bytes: a model's body began with its fixed options (the
     * model, an answer schema's response_format of hundreds of bytes), so every row had one key and one replica.
     * The messages come first.
     */
    @Test
    void aRequestBodyBeginsWithItsMessages() throws Exception {
        JsonNode plan = modelPlan("[{\"name\": \"q\", \"type\": {\"sql\": \"STRING\", \"root\": \"VARCHAR\"}}]",
                "'answer.constraint': 'response-format'",
                "{'name': 'score', 'type': {'sql': 'INT', 'root': 'INTEGER'}}");
        RowType input = (RowType) SqlTypes.dataType("ROW<`q` STRING>").getLogicalType();
        ModelPredictFunction.Prompt prompt = new ModelPredictFunction.Prompt(
                io.dspark.vllm.plan.PlanReader.readModel(plan),
                io.dspark.vllm.request.RequestSpec.fromJson(plan.get("request").get("client")), input);
        String body = new String(prompt.of(GenericRowData.of(StringData.fromString("Rate this: great"))).body,
                java.nio.charset.StandardCharsets.UTF_8);
        assertTrue(body.startsWith("{\"messages\":[{\"role\":\"user\",\"content\":\"Rate this: great\"}]"), body);
        assertTrue(body.contains("\"response_format\""), body);
    }

    @Test
    void chatMessagesThatNoServerTakesAreNotSent() throws Exception {
        JsonNode plan = modelPlan("[{\"name\": \"history\", \"type\": {\"sql\": \"ARRAY<ROW<`role` STRING, "
                + "`content` STRING>>\", \"root\": \"ARRAY\"}}]");
        RowType input = (RowType) SqlTypes.dataType(
                "ROW<`history` ARRAY<ROW<`role` STRING, `content` STRING>>>").getLogicalType();
        ModelPredictFunction.Prompt prompt = new ModelPredictFunction.Prompt(
                io.dspark.vllm.plan.PlanReader.readModel(plan),
                io.dspark.vllm.request.RequestSpec.fromJson(plan.get("request").get("client")), input);
        java.util.function.Function<Object[], String> problem = messages -> prompt.of(
                GenericRowData.of(new GenericArrayData(messages))).problem;
        GenericRowData user = GenericRowData.of(StringData.fromString("user"), StringData.fromString("Hi"));
        assertEquals(null, problem.apply(new Object[] {user}));
        assertEquals("INPUT column 'history' (the messages) has no message", problem.apply(new Object[0]));
        assertEquals("INPUT column 'history' (the messages) has a NULL message (message 2)",
                problem.apply(new Object[] {user, null}));
        assertEquals("INPUT column 'history' (the messages) has a message with a NULL role (message 1)",
                problem.apply(new Object[] {GenericRowData.of(null, StringData.fromString("Hi"))}));
        assertEquals("INPUT column 'history' (the messages) has a message with a NULL content (message 2)",
                problem.apply(new Object[] {user, GenericRowData.of(StringData.fromString("assistant"), null)}));
    }

    @Test
    void aRowThatNamesAnEmptyModelIsNotSent() throws Exception {
        JsonNode plan = modelPlan("[{\"name\": \"q\", \"type\": {\"sql\": \"STRING\", \"root\": \"VARCHAR\"}}, "
                + "{\"name\": \"model\", \"type\": {\"sql\": \"STRING\", \"root\": \"VARCHAR\"}}]");
        RowType input = (RowType) SqlTypes.dataType("ROW<`q` STRING, `model` STRING>").getLogicalType();
        ModelPredictFunction.Prompt prompt = new ModelPredictFunction.Prompt(
                io.dspark.vllm.plan.PlanReader.readModel(plan),
                io.dspark.vllm.request.RequestSpec.fromJson(plan.get("request").get("client")), input);
        assertEquals("INPUT column 'model' sets the request's 'model' to an empty string",
                prompt.of(GenericRowData.of(StringData.fromString("Hi"), StringData.fromString(""))).problem);
        ModelPredictFunction.Prompt.Request named =
                prompt.of(GenericRowData.of(StringData.fromString("Hi"), StringData.fromString("other")));
        assertEquals(null, named.problem);
        assertTrue(new String(named.body, java.nio.charset.StandardCharsets.UTF_8).contains("\"model\":\"other\""));
        assertEquals(null, prompt.of(GenericRowData.of(StringData.fromString("Hi"), null)).problem);
    }
}
