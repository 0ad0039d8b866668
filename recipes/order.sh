# shellcheck shell=bash
# (uses DIFFICULTY_FIELD, set by common.sh)
# recipes/order.sh: the Hydra keys that set the order of the training data (sourced by common.sh).
# They are the keys docs/ordering.md gives (tests/test_recipes_scripts.py checks them), written out so that a
# dry run needs no Python.
#
#   random  verl's own RandomSampler over TRAIN_FILE (data.shuffle=True, data.seed from common.sh):
#           EBPO-naive and the baselines.
#   topic   cluster by cluster (EBPO-topic): reads extra_info.topic, written by
#           `recipes/data/label_data.sh topics` (verl-ebpo label-topics).
#   diff    easy -> hard by pass rate (EBPO-diff; GRPO-diff with ORDER=diff): reads DIFFICULTY_FIELD
#           [extra_info.difficulty_<model>, the pass rate of that model's DIFFICULTY_MODEL], written by
#           `recipes/data/label_data.sh difficulty <model>` (verl-ebpo label-difficulty).
# Further options of the ordered datasets: ++data.ordering.<key>=<value> on the command line
# (see docs/ordering.md: verl_ebpo.samplers.ordering.TopicOptions / DifficultyOptions).

# shellcheck disable=SC2034  # ORDER_ARGS is read by common.sh
recipe_order_args() {
    case "$1" in
        random)
            ORDER_ARGS=(data.shuffle=True)
            ;;
        topic)
            ORDER_ARGS=(
                data.shuffle=False
                data.custom_cls.path=pkg://verl_ebpo.samplers.dataset
                data.custom_cls.name=TopicOrderedDataset
            )
            ;;
        diff)
            ORDER_ARGS=(
                data.shuffle=False
                data.custom_cls.path=pkg://verl_ebpo.samplers.dataset
                data.custom_cls.name=DifficultyOrderedDataset
                ++data.ordering.field="$DIFFICULTY_FIELD"
            )
            ;;
        *)
            echo "recipes/order.sh: unknown order '$1' (random | topic | diff)" >&2
            return 2
            ;;
    esac
}
