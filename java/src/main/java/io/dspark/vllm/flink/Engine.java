package io.dspark.vllm.flink;

import io.dspark.vllm.plan.Plan;
import io.dspark.vllm.request.RequestSpec;
import io.dspark.vllm.request.Requester;
import io.dspark.vllm.store.StoredRequests;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * What a table's request step ({@link RequestStep}) and a model's predict function ({@link ModelPredictFunction})
 * both build from their plan, built here once: the request columns held to this jar's, and the requests sent
 * through the response store the plan names.
 */
final class Engine {
    private Engine() {}

    /** Refuses the plan's request columns unless they are the row this jar's request step makes. */
    static void checkRequestColumns(List<Plan.NameType> planned) {
        List<String> names = new ArrayList<>();
        List<String> types = new ArrayList<>();
        planned.forEach(pair -> {
            names.add(pair.name);
            types.add(pair.type);
        });
        if (!names.equals(RequestStep.COLUMNS) || !types.equals(RequestStep.TYPES)) {
            throw new IllegalArgumentException(
                    "dspark-vllm: the plan's request columns " + names + " " + types + " are not this jar's "
                            + RequestStep.COLUMNS + " " + RequestStep.TYPES
                            + ": install the same dspark-vllm on the client and the TaskManagers");
        }
    }

    /**
     * The requests of one subtask, sent by a {@link Requester} of {@code spec} through the plan's store
     * ('request.store', 'request.cache'; none when {@code store} is null). {@code restored}: a Kafka store's
     * positions from the checkpoint (the table's; a model's function has no checkpoint hook), or null.
     * {@code subtasks}: the operator's parallelism, the requesters that send to the same replicas.
     */
    static StoredRequests requests(RequestSpec spec, Plan.Store store, int subtask, int subtasks,
            Map<Integer, Long> restored) {
        return new StoredRequests(new Requester(spec, subtasks), store == null ? null : store.uri,
                store == null ? 0 : store.cacheTtlMs, subtask, restored);
    }
}
