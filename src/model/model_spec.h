/* model_spec: the private seam between model.c (finding the file, naming the model, the
 * public helpers) and model_spec.c (reading a config.json and listing its tensors). */
#ifndef RF_MODEL_SPEC_H
#define RF_MODEL_SPEC_H

#include "model.h"

/* Reads the Hugging Face config.json at `path` into `model`: the architecture fields, the
 * tensor list and the totals. `model->name` is left alone (the caller derives it from the
 * path). On failure logs one line naming `path` and the key, and returns RF_ERR_MODEL (or
 * RF_ERR_NOMEM); `model` may then hold a partial tensor list that rf_model_free releases. */
rf_status rf_model_read_config(const char *path, rf_model *model);

#endif
