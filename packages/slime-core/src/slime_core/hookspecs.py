"""Every hook a slime plugin can implement.

A plugin is a module or object with functions named like these specs, decorated with
``slime_core.hookimpl``. There are three kinds of hook:

1. options: a package adds its command-line/config options and subcommands;
2. registration: ``slime_register_<things>(register)`` adds named implementations that the
   config then selects by name (``register(name, obj)``; ``obj`` may be the object itself or
   a ``"module:attribute"`` string imported on first use, which keeps plugin modules light);
3. lifecycle: before/after pairs around each phase of the loop.

Unless a spec says otherwise, hooks run in the driver process (the one that runs
``slime run``).
"""

import pluggy

hookspec = pluggy.HookspecMarker("slime")

# --------------------------------------------------------------------------------------
# options
# --------------------------------------------------------------------------------------


@hookspec
def slime_add_options(options):
    """Add this plugin's options to ``slime run`` (command line and YAML config).

    Called once when the option set is built, before any config is read.

    :param options: a ``slime_core.config.options.OptionSet``; call
        ``options.add("--flag-name", type=int, default=..., help=..., group=...)``.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_validate_config(config):
    """Check a resolved config for problems only this plugin understands.

    Called after the config is merged and type-checked, before anything starts. Errors
    from every plugin are collected and reported together.

    :param config: the resolved ``slime_core.config.Config``.
    :return: a list of error strings (what is wrong and how to fix it), or None.

    Runs in the driver.
    """


@hookspec
def slime_add_commands(subparsers):
    """Add subcommands to the ``slime`` command (e.g. ``slime reward score``).

    Called when the ``slime`` command line is built.

    :param subparsers: the ``argparse`` subparsers action of the ``slime`` parser; set
        ``func=`` with ``set_defaults`` to the callable that runs the command (it gets the
        parsed ``argparse.Namespace``, with ``plugin_modules`` (the ``-p`` modules) and
        ``extra`` (arguments argparse did not know, allowed only with
        ``set_defaults(allow_extra=True)``), and returns an exit code).
    :return: nothing.

    Runs in the process that runs the ``slime`` command.
    """


# --------------------------------------------------------------------------------------
# registration
# --------------------------------------------------------------------------------------


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
        the engines at ``worker_urls`` and returns once it routes to them.
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
        in a Ray actor).
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_register_reward_functions(register):
    """Register reward functions, selected with ``--rm-type NAME`` or per sample with
    ``metadata["rm_type"]``.

    Called the first time a reward function is looked up.

    :param register: ``register(name, reward_fn_or_ref)``.
    :return: nothing.

    Runs in the driver and in the rollout process that scores samples.
    """


@hookspec
def slime_register_group_filters(register):
    """Register group filters for dynamic sampling, which accept or reject a whole group
    once it is generated and scored (``--dynamic-sampling-filter NAME``).

    A group filter is ``fn(group, config, progress) -> bool`` (True keeps the group);
    ``progress`` is a ``slime_core.filters.RolloutProgress``. Called the first time a group
    filter is looked up.

    :param register: ``register(name, filter_fn_or_ref)``.
    :return: nothing.

    Runs in the rollout process.
    """


@hookspec
def slime_register_sample_filters(register):
    """Register sample filters, which drop single samples from training (``--sample-filter
    NAME ...``), e.g. truncated or over-long responses.

    A sample filter is ``fn(sample, config) -> bool`` (True keeps the sample). A rejected
    sample stays in its group (its reward still counts in the group's statistics) but its
    loss mask becomes zeros (``slime_core.loop.sample_filters``). Called the first time a
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
        entropy, KL and mismatch terms and reduces it over the global batch.
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
        config, parts) -> slime_core.rollout_result.RolloutResult`` (``parts``: a
        ``slime_core.rollout_parts.RolloutParts``: data source, reward hub, generate
        function, group filter, generation context and the engines' controls). A function
        marked with ``slime_core.rollout_parts.without_engines`` (e.g. ``sft``) runs with no
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
        ``Sample.append_response`` and sets its status (``ctx``: engine, tokenizer, config).
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


# --------------------------------------------------------------------------------------
# lifecycle: the run
# --------------------------------------------------------------------------------------


@hookspec
def slime_before_run(config):
    """Called once after the config is resolved, before any Ray actor starts.

    :param config: the resolved ``Config``.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_after_run(config, status):
    """Called once when the run ends, after actors are shut down.

    :param config: the resolved ``Config``.
    :param status: ``"completed"``, ``"failed"`` or ``"interrupted"``.
    :return: nothing.

    Runs in the driver.
    """


# --------------------------------------------------------------------------------------
# lifecycle: rollout
# --------------------------------------------------------------------------------------


@hookspec
def slime_before_rollout(rollout_id, config):
    """Called before generation of a rollout starts.

    :param rollout_id: index of the rollout (0-based, continues after a resume).
    :param config: the resolved ``Config``.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_after_rollout(rollout_id, groups, metrics):
    """Called after a rollout is generated, scored and filtered, before training on it.

    :param rollout_id: index of the rollout.
    :param groups: ``list[list[Sample]]``, one inner list per prompt group; plugins may
        read and annotate samples (metadata) but should not change their tokens.
    :param metrics: dict of rollout metrics; plugins may add keys.
    :return: nothing.

    Runs in the driver.
    """


# --------------------------------------------------------------------------------------
# lifecycle: training
# --------------------------------------------------------------------------------------


@hookspec
def slime_before_train_step(rollout_id, step):
    """Called before each optimizer step on a rollout's data (``--num-steps-per-rollout``
    of them per rollout; the train ranks run one step between this hook and the next).

    :param rollout_id: index of the rollout being trained on.
    :param step: optimizer step index within the rollout (0..num_steps_per_rollout-1).
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_after_train_step(rollout_id, step, metrics):
    """Called after an optimizer step, with its metrics.

    :param rollout_id: index of the rollout being trained on.
    :param step: optimizer step index within the rollout.
    :param metrics: dict of train metrics (losses, KL, grad norm, ...); plugins may add keys.
    :return: nothing.

    Runs in the driver.
    """


# --------------------------------------------------------------------------------------
# lifecycle: weight update
# --------------------------------------------------------------------------------------


@hookspec
def slime_before_weight_update(rollout_id, version):
    """Called before new weights are pushed to the rollout engines.

    :param rollout_id: index of the rollout just trained on.
    :param version: the weight version about to be pushed.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_after_weight_update(rollout_id, version, metrics):
    """Called after every engine has the new weights.

    :param rollout_id: index of the rollout just trained on.
    :param version: the weight version now served.
    :param metrics: dict with the update's time and bytes; plugins may add keys.
    :return: nothing.

    Runs in the driver.
    """


# --------------------------------------------------------------------------------------
# lifecycle: evaluation
# --------------------------------------------------------------------------------------


@hookspec
def slime_before_eval(rollout_id):
    """Called before an evaluation rollout.

    :param rollout_id: index of the rollout after which evaluation runs.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_after_eval(rollout_id, metrics):
    """Called after an evaluation rollout, with its per-dataset scores.

    :param rollout_id: index of the rollout after which evaluation ran.
    :param metrics: dict with ``eval/<name>/...`` keys; plugins may add keys.
    :return: nothing.

    Runs in the driver.
    """


# --------------------------------------------------------------------------------------
# lifecycle: checkpoint
# --------------------------------------------------------------------------------------


@hookspec
def slime_before_save(rollout_id, path):
    """Called before a checkpoint is written.

    :param rollout_id: index of the last rollout the checkpoint contains.
    :param path: directory the checkpoint is written to.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_after_save(rollout_id, path):
    """Called after a checkpoint is completely written (and visible as complete).

    :param rollout_id: index of the last rollout the checkpoint contains.
    :param path: directory of the finished checkpoint; plugins may add files to it.
    :return: nothing.

    Runs in the driver.
    """
