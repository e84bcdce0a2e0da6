"""The perception module: blocks with shape inference, template builders, model composers and model graphs.

Submodules: ``blocks`` (PerceptionBlock, InferenceBlock and the built-in blocks), ``builders`` (ConcatModelBuilder),
``composers`` (TemplateModelComposer, CustomModelComposer, policy and critic composers), ``models.built_in``
(flatten-concat networks), ``action_masks`` (which observation masks which action head), ``graph`` (SVG model
graphs), ``perception_utils`` and ``weight_init``.
"""
