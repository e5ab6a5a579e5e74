package io.dspark.vllm.sql;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.TableEnvironment;
import org.apache.flink.table.api.internal.TableEnvironmentImpl;
import org.apache.flink.table.catalog.CatalogManager;
import org.apache.flink.table.catalog.ContextResolvedModel;
import org.apache.flink.table.catalog.ObjectIdentifier;
import org.apache.flink.table.catalog.UnresolvedIdentifier;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import java.util.Optional;

/**
 * {@code dspark-vllm answer-schema FILE.sql}: the JSON Schema each 'dspark-vllm' model of a SQL file sends for its
 * answer fields, as the model's plan carries it, before any job runs. Runs the file's CREATE and USE
 * statements (no query, no job), then plans each model the way {@code ML_PREDICT} does. Prints, per model, a line
 * saying how the server is asked, then the schema; a model without answer fields says so.
 */
public final class AnswerSchema {
    private AnswerSchema() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: AnswerSchema FILE.sql [key=value ...]");
            System.exit(2);
        }
        Configuration config = new Configuration();
        for (int i = 1; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            if (kv.length == 2) {
                config.setString(kv[0], kv[1]);
            }
        }
        String script = Files.readString(Path.of(args[0]), StandardCharsets.UTF_8);
        TableEnvironment t = TableEnvironment.create(
                EnvironmentSettings.newInstance().inStreamingMode().withConfiguration(config).build());
        int models = 0;
        ObjectMapper json = new ObjectMapper();
        for (String statement : SqlRunner.statements(script)) {
            String head = statement.stripLeading().split("\\s+", 2)[0].toUpperCase(Locale.ROOT);
            if (!head.equals("CREATE") && !head.equals("USE")) {
                continue; // queries, jobs and the session's options: none shapes a model's schema
            }
            try {
                t.executeSql(statement);
            } catch (Exception e) {
                System.err.println("dspark-vllm answer-schema: " + PythonPlanner.oneLine(
                        SqlRunner.withoutTraceback(String.valueOf(e.getMessage()))));
                System.exit(1);
            }
        }
        CatalogManager catalogs = ((TableEnvironmentImpl) t).getCatalogManager();
        java.util.Set<String> names = new java.util.LinkedHashSet<>(java.util.Arrays.asList(t.listModels()));
        names.addAll(java.util.Arrays.asList(t.listTemporaryModels()));
        for (String name : names) {
            ObjectIdentifier id = catalogs.qualifyIdentifier(UnresolvedIdentifier.of(name));
            Optional<ContextResolvedModel> model = catalogs.getModel(id);
            if (model.isEmpty() || !DsparkVllmTableFactory.IDENTIFIER.equals(
                    model.get().getResolvedModel().getOptions().get("provider"))) {
                continue;
            }
            models++;
            io.dspark.vllm.plan.Plan.Model plan;
            try {
                plan = io.dspark.vllm.plan.PlanReader.readModel(
                        PythonPlanner.planModel(id, model.get().getResolvedModel(), config.toMap()));
            } catch (Exception e) {
                System.err.println("dspark-vllm answer-schema: " + PythonPlanner.oneLine(String.valueOf(e.getMessage())));
                System.exit(1);
                return;
            }
            io.dspark.vllm.plan.Plan.Answer answer = plan.answer;
            if (answer == null) {
                System.out.println("-- model " + name + ": no answer fields (its OUTPUT columns are the profile's "
                        + "and metadata keys)");
                continue;
            }
            String how = answer.constraint;
            System.out.println("-- model " + name + ": sent as " + (how.equals("response-format")
                    ? "response_format json_schema (strict)" : how.equals("structured-outputs")
                    ? "structured_outputs json" : "an instruction in the prompt") + "; every answer is checked "
                    + "against it");
            System.out.println(json.writerWithDefaultPrettyPrinter().writeValueAsString(answer.schema));
        }
        if (models == 0) {
            System.err.println("dspark-vllm answer-schema: " + args[0] + " creates no model with 'provider' = '"
                    + DsparkVllmTableFactory.IDENTIFIER + "'");
            System.exit(1);
        }
    }
}
