"""Registration hooks: ``slime_register_<things>(register)`` adds named implementations that
the config selects by name."""

from slime_core.hookspecs.marker import hookspec


@hookspec
def slime_register_train_backends(register):
    """Register train backends, selected with ``--train-backend NAME``.

    Called the first time a train backend is looked up.

    :param register: ``register(name, rank_class_or_ref)``; the class implements
        ``slime_core.train_backend.TrainRank`` and is instantiated once per training rank,
        in a Ray actor, by ``slime_core.train_backend.TrainGroup``.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_register_critics(register):
    """Register the PPO critic of a train backend, under the train backend's own name
    (``--advantage-estimator ppo`` with ``--train-backend NAME`` uses critic ``NAME``).

    Called the first time a critic is looked up. A train backend that registers none cannot
    run PPO; the config check says so before anything starts.

    :param register: ``register(train_backend_name, critic_rank_class_or_ref)``; the class
        implements ``slime_core.train_backend.TrainRank``'s ``__init__``, ``init``, ``save``,
        ``offload``/``onload``, plus ``compute_values(share)`` (V_old of each response token)
        and ``train(rollout_id, share) -> metrics`` (every value-loss step of a rollout in one
        call); it runs like the policy's ranks, one Ray actor per rank.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_register_rollout_backends(register):
    """Register rollout backends, selected with ``--rollout-backend NAME``.

    Called the first time a rollout backend is looked up.

    :param register: ``register(name, backend_or_ref)``; the backend implements
        ``slime_core.rollout_backend.RolloutBackend``: the bundles its engines need, starting
        them (``Engines``: control calls, weight-update transports, health, restart), and a
        generation client (``slime_core.engine.RolloutEngine``) for an engine's or the
        router's address.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_register_routers(register):
    """Register routers, selected with ``--router NAME`` (the core registers ``none``).

    Called the first time a router is looked up.

    :param register: ``register(name, start_fn_or_ref)``; ``start(config, worker_urls,
        plugins) -> slime_core.router.Router`` starts (or connects to) the router in front of
        the engines at ``worker_urls`` and returns once it routes to them. The loop starts
        it with none, while the engines start, and adds each with ``add_worker``.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_register_rollout_engines(register):
    """Register engine servers that speak SGLang's native HTTP API, which slime-sglang's
    rollout backend starts (``--rollout-backend sglang --rollout-engine NAME``).

    Called the first time a rollout engine is looked up. An engine with an API of its own
    registers a rollout backend instead (``slime_register_rollout_backends``).

    :param register: ``register(name, command_fn_or_ref)``; ``command_fn(config, model_path,
        port) -> argv`` starts one engine server on 127.0.0.1:port (slime-sglang runs it
        in a Ray actor). On a run that spans Ray nodes it is called with ``host=`` as well (the
        node's IP, to listen on). The server starts with the run's token in its environment
        (``SLIME_ADMIN_API_KEY``: its control endpoints must require it as ``Authorization:
        Bearer``; across nodes ``SLIME_API_KEY`` too: every route but ``/health`` must), never on
        its command line (`slime_core.cluster.network`). A server that exits saying ``address already
        in use`` is started again on a fresh port. A command marked ``slime_sglang.servers.seeds_each_copy``
        says its server seeds each copy of a request for n samples (`slime_core.engine.parallel_sample_seed`).
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_register_reward_functions(register):
    """Register reward functions, selected with ``--rm-type NAME`` or per sample with
    ``metadata["rm_type"]``.

    Called the first time a reward function is looked up.

    :param register: ``register(name, reward_fn_or_ref, label=None)``. ``label`` declares
        what labels the function grades: ``check(label, metadata) -> None`` when it grades
        ``label`` (the record's ``--label-key`` value; ``metadata``, the sample's), else a
        short phrase of what it expects (``"text or a number"``); or its
        ``"module:attribute"``. Before a run starts every record of the prompt files is
        checked, and a label of the wrong kind is an error naming file:line, the function
        and what it expects, instead of a silent 0. Functions that declare none are not checked.
    :return: nothing.

    Runs in the driver and in the rollout process that scores samples.
    """


@hookspec
def slime_register_group_filters(register):
    """Register group filters for dynamic sampling, which accept or reject a whole group
    once it is generated and scored (``--dynamic-sampling-filter NAME``).

    A group filter is ``fn(group, config, progress) -> bool`` (True keeps the group);
    ``progress`` is a ``slime_core.rollout.filters.RolloutProgress``. Called the first time a group
    filter is looked up.

    :param register: ``register(name, filter_fn_or_ref)``.
    :return: nothing.

    Runs in the rollout process.
    """


@hookspec
def slime_register_sample_filters(register):
    """Register sample filters, which drop single samples from training (``--sample-filter
    NAME ...``), e.g. truncated or over-long responses.

    A sample filter is ``fn(sample, config) -> bool`` (True keeps the sample), or, marked
    with ``slime_core.rollout.sample_filters.over_rollout``, ``fn(groups, config) -> keep`` that
    judges the whole rollout at once (``keep[g][i]`` for sample i of group g). A rejected
    sample stays in its group (its reward still counts in the group's statistics) but its
    loss mask becomes zeros (``slime_core.rollout.sample_filters``). Called the first time a
    sample filter is looked up.

    :param register: ``register(name, filter_fn_or_ref)``.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_register_buffer_filters(register):
    """Register buffer filters, which choose the partial groups the data source hands out
    first (``--buffer-filter NAME``).

    Called the first time a buffer filter is looked up.

    :param register: ``register(name, buffer_filter_fn_or_ref)``.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_register_advantage_estimators(register):
    """Register advantage estimators, selected with ``--advantage-estimator NAME``.

    Called the first time an advantage estimator is looked up.

    :param register: ``register(name, estimator_fn_or_ref)``; an estimator is
        ``fn(inputs: slime_core.algorithms.AdvantageInputs) -> (advantages, returns)``, both
        (B, T) and 0 where ``inputs.loss_mask`` is 0.
    :return: nothing.

    Runs in each train rank.
    """


@hookspec
def slime_register_policy_losses(register):
    """Register policy losses, selected with ``--loss-type NAME``.

    Called the first time a policy loss is looked up.

    :param register: ``register(name, loss_fn_or_ref)``; a loss is the per-token surrogate
        ``fn(log_probs, old_log_probs, advantages, loss_mask, config) -> (loss, clipfrac)``, all
        (B, T), ``config`` a ``slime_core.algorithms.PolicyLossConfig``; the core adds the
        entropy, KL and mismatch terms and reduces it over the global batch. A loss with the
        attribute ``needs_logits = True`` computes the whole micro-batch loss from the model's
        outputs instead: ``fn(logits, inputs, denominators, config) -> (loss, metrics)``,
        ``logits`` a ``slime_core.rank.step.SampleLogits`` (per sample, full-vocabulary logits
        of every position, with gradient, and its tokens; built only for such a loss, as they
        cost (total_len, V) floats per sample), ``inputs`` the micro-batch's
        ``PolicyLossInputs``, ``denominators`` the global batch's ``LossDenominators``; it
        returns the micro-batch's contribution to the global-batch loss and float metrics
        (contributions too, summed over micro-batches and ranks).
    :return: nothing.

    Runs in each train rank.
    """


@hookspec
def slime_register_tis_functions(register):
    """Register TIS functions, which correct the per-token policy-gradient loss for the
    rollout/train mismatch, selected with ``--tis-mode NAME`` and applied with ``--use-tis``
    (``--get-mismatch-metrics`` only reports their metrics).

    Called the first time a TIS function is looked up.

    :param register: ``register(name, tis_fn_or_ref)``; a TIS function is
        ``fn(pg_loss, inputs, config) -> (pg_loss, loss_mask, metrics)``: ``pg_loss`` (B, T),
        ``inputs`` a ``slime_core.algorithms.PolicyLossInputs`` (``old_log_probs`` the trainer's
        π_old, ``rollout_log_probs`` the engine's), ``config`` a ``PolicyLossConfig`` (the run's
        options in ``config.run_config``); it returns the corrected (B, T) loss, the (B, T) mask
        to reduce it over (rejected tokens 0; denominators keep ``inputs.loss_mask``) and
        per-token (B, T) metrics, reduced like the loss. Built-ins: ``truncate``, ``icepop``.
    :return: nothing.

    Runs in each train rank.
    """


@hookspec
def slime_register_pg_loss_reducers(register):
    """Register pg-loss reducers, selected with ``--pg-loss-reducer NAME``: they reduce the
    policy-gradient term alone (the entropy and KL terms and the metrics keep the reduction of
    ``--calculate-per-token-loss`` / ``--use-constant-denominator``).

    Called the first time a pg-loss reducer is looked up.

    :param register: ``register(name, reducer_fn_or_ref)``; a reducer is
        ``fn(pg_loss, loss_mask, inputs, denominators, config) -> scalar``: ``pg_loss`` and
        ``loss_mask`` (B, T) after the TIS function, ``inputs`` the micro-batch's
        ``PolicyLossInputs``, ``denominators`` the global batch's ``LossDenominators``,
        ``config`` a ``PolicyLossConfig``; it returns the micro-batch's contribution to the
        global-batch pg loss (as ``slime_core.algorithms.reduce_loss`` does).
    :return: nothing.

    Runs in each train rank.
    """


@hookspec
def slime_register_data_sources(register):
    """Register data sources, selected with ``--data-source NAME``.

    Called the first time a data source is looked up.

    :param register: ``register(name, data_source_class_or_ref)``.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_register_rollout_functions(register):
    """Register rollout functions (a whole rollout: prompts in, scored groups out),
    selected with ``--rollout-function NAME``.

    Called the first time a rollout function is looked up.

    :param register: ``register(name, rollout_fn_or_ref)``; ``async rollout_fn(rollout_id,
        config, parts) -> slime_core.rollout.result.RolloutResult`` (``parts``: a
        ``slime_core.rollout.parts.RolloutParts``: data source, reward hub, generate
        function, group filter, generation context and the engines' controls). A function
        marked with ``slime_core.rollout.parts.without_engines`` (e.g. ``sft``) runs with no
        engine or router started, and ``parts.generate`` / ``parts.ctx.engine`` None.
    :return: nothing.

    Runs in the rollout process.
    """


@hookspec
def slime_register_generate_functions(register):
    """Register per-sample generate functions (e.g. a multi-turn tool loop), selected with
    ``--generate-function NAME``.

    Called the first time a generate function is looked up.

    :param register: ``register(name, generate_fn_or_ref)``; ``async generate_fn(sample,
        sampling, ctx) -> Sample`` extends the sample's response with
        ``Sample.append_response`` and sets its status (``ctx``: engine, tokenizer, config);
        it may instead return a list of samples (one trajectory split into several training
        samples, e.g. one per agent), which take the sample's place in its group.
    :return: nothing.

    Runs in the rollout process.
    """


@hookspec
def slime_register_sample_hooks(register):
    """Register sample hooks, selected with ``--sample-hook NAME ...`` and applied in that
    order by the default rollout to each sample it generates, after generation and before
    the reward (THUDM slime's ``--rollout-sample-hook-path``).

    A sample hook is ``fn(sample, config, rollout_id) -> Sample | None``, sync or async; it
    may change the sample in place (return None) or return the sample to go on with.
    Called the first time a sample hook is looked up.

    :param register: ``register(name, hook_fn_or_ref)``.
    :return: nothing.

    Runs in the rollout process.
    """


@hookspec
def slime_register_all_groups_hooks(register):
    """Register all-groups hooks, selected with ``--all-groups-hook NAME ...`` and called by
    the default rollout once it has its groups (THUDM slime's
    ``--rollout-all-samples-process-path``).

    An all-groups hook is ``fn(rollout_id, groups, config, data_source) -> None``, sync or
    async: ``groups`` are every group the rollout generated to the end, in group order — the
    accepted ones and those the dynamic-sampling filter (or a failed reward) rejected, not the
    aborted ones. Changes to accepted samples reach training; ``data_source.add_samples``
    hands groups back to be served first. Called the first time one is looked up.

    :param register: ``register(name, hook_fn_or_ref)``.
    :return: nothing.

    Runs in the rollout process.
    """


@hookspec
def slime_register_eval_functions(register):
    """Register evaluation functions, selected with ``--eval-function NAME`` (or a one-off
    ``--eval-function module:function``; slime's ``--eval-function-path`` is slime-compat's).

    Called the first time an eval function is looked up (only with ``--eval-prompt-data``).

    :param register: ``register(name, eval_fn_or_ref)``; ``async eval_fn(config, parts,
        datasets) -> dict`` scores every prompt of each dataset (``datasets``: name ->
        ``slime_core.data.prompt_dataset.PromptDataset``) and returns ``eval/<name>/...``
        metrics.
    :return: nothing.

    Runs in the rollout process.
    """


@hookspec
def slime_register_router_middlewares(register):
    """Register router middlewares, enabled with ``--router-middleware NAME ...``.

    A middleware is a factory ``factory(next_app, config) -> app`` composed once at
    start-up in front of the router. Called the first time a router middleware is looked up.

    :param register: ``register(name, middleware_factory_or_ref)``.
    :return: nothing.

    Runs in the router process.
    """


@hookspec
def slime_register_reward_post_processors(register):
    """Register reward post-processors, selected with ``--reward-post-process NAME``: they
    replace the advantage estimator's group normalisation of the rewards (THUDM slime's
    ``--custom-reward-post-process-path``).

    A post-processor is ``fn(samples, config) -> (raw_rewards, rewards)``: ``samples`` are
    the rollout's trainable samples in batch order, and it returns one number per sample in
    each list. ``rewards`` are trained on as they are (the train ranks do not normalise them
    again); ``raw_rewards`` are logged as the rollout's reward (``rollout/reward_mean``, ...).
    Called the first time a post-processor is looked up.

    :param register: ``register(name, post_processor_or_ref)``.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_register_train_data_converters(register):
    """Register train-data converters, selected with ``--train-data-converter NAME``: they
    turn a rollout's samples into the ``slime_core.rollout_batch.RolloutBatch`` the train
    ranks receive, instead of ``RolloutBatch.from_samples`` (THUDM slime's
    ``--custom-convert-samples-to-train-data-path``).

    A converter is ``fn(samples, config) -> RolloutBatch``: ``samples`` are the rollout's
    trainable samples in prompt order; entries of one prompt group must share a
    ``group_ids`` value (a group stays on one rank). A batch with ``raw_rewards`` set has
    post-processed ``rewards``, which the ranks do not normalise again. With
    ``--reward-post-process`` too, the post-processor's rewards replace the batch's, one per
    entry. Called the first time a converter is looked up.

    :param register: ``register(name, converter_or_ref)``.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_register_checkpoint_readers(register):
    """Register readers of checkpoint formats other than a Hugging Face directory, by format
    name (slime-megatron registers ``megatron``: torch_dist checkpoints, ours and Megatron-LM's).

    A reader is ``fn(checkpoint_dir, hf_config_dir, out_dir)``: it writes to ``out_dir`` a
    Hugging Face model directory holding the checkpoint's weights with the config and tokenizer
    of ``hf_config_dir``. A train backend that reads Hugging Face weights only (FSDP) uses it
    for a ``--ref-load`` in another format. Called the first time a reader is looked up.

    :param register: ``register(name, reader_or_ref)``.
    :return: nothing.

    Runs in the train ranks.
    """
