/* GraphMetadata, kept as a subtree: checks and accessors for what the graph server uses of it
 * (component addresses, dynamic settings, initial settings, settings schemas). */
#include "proto/meta39.h"

#include "ezmsg/ezmsg.h"

#include <stdio.h>
#include <string.h>

static int fail(ezi_pk_err *err, const char *what, const char *field) {
  if (err && !err->code) {
    err->code = EZ_EPROTO;
    snprintf(err->msg, sizeof(err->msg), "GraphMetadata: %.40s %.60s", what, field);
  }
  return EZ_EPROTO;
}

/* A dataclass instance of graphmeta's class `name` (as p_obj in meta39.c checks it). */
static bool is_instance(const ezi_pk *n, const char *name) {
  return ezi_pk_is_class(n, EZI_M39_MOD, name) && n->how == EZI_PK_NEWOBJ &&
         ezi_pk_len(n->u.o.args) == 0 && n->u.o.state && n->u.o.state->type == EZI_PK_DICT;
}

static int get_str(const ezi_pk *obj, const char *field, bool optional, const char **out,
                   ezi_pk_err *err) {
  const ezi_pk *v = ezi_pk_attr(obj, field);
  if (optional && v && v->type == EZI_PK_NONE) return *out = NULL, 0;
  if (!(*out = ezi_pk_cstr_of(v))) return fail(err, "a bad or missing str:", field);
  return 0;
}

int ezi_m39_meta_component(const ezi_pk *meta, size_t i, ezi_m39_component *out, ezi_pk_err *err) {
  memset(out, 0, sizeof(*out));
  const ezi_pk *comps = ezi_pk_attr(meta, "components"), *c = ezi_pk_value(comps, i);
  if (!is_instance(meta, "GraphMetadata") || !c) return fail(err, "no component", "");
  if (!is_instance(c, "ComponentMetadata") && !is_instance(c, "CollectionMetadata") &&
      !is_instance(c, "UnitMetadata"))
    return fail(err, "a component of class", ezi_pk_type_name(c));
  out->node = c;
  if (get_str(c, "address", false, &out->address, err) ||
      get_str(c, "name", false, &out->name, err) ||
      get_str(c, "component_type", false, &out->component_type, err) ||
      get_str(c, "settings_type", false, &out->settings_type, err))
    return EZ_EPROTO;
  const char *key = ezi_pk_cstr_of(ezi_pk_key(comps, i));
  if (!key || strcmp(key, out->address) != 0) return fail(err, "a key is not its address:", key);
  const ezi_pk *dyn = ezi_pk_attr(c, "dynamic_settings"), *en = ezi_pk_attr(dyn, "enabled");
  if (!is_instance(dyn, "DynamicSettingsMetadata") || !en || en->type != EZI_PK_BOOL)
    return fail(err, "bad dynamic_settings of", out->address);
  out->dynamic_enabled = en->b;
  if (get_str(dyn, "input_topic", true, &out->dynamic_input_topic, err) ||
      get_str(dyn, "settings_type", true, &out->dynamic_settings_type, err))
    return EZ_EPROTO;
  const ezi_pk *init = ezi_pk_attr(c, "initial_settings");
  const ezi_pk *ser = ezi_pk_item(init, 0), *repr = ezi_pk_item(init, 1);
  if (!init || init->type != EZI_PK_TUPLE || ezi_pk_len(init) != 2 ||
      (ser->type != EZI_PK_BYTES && ser->type != EZI_PK_NONE) ||
      (repr->type != EZI_PK_DICT && repr->type != EZI_PK_STR))
    return fail(err, "bad initial_settings of", out->address);
  if (ser->type == EZI_PK_BYTES)
    out->initial_serialized = (ezi_m39_bytes){true, (const uint8_t *)ser->u.s.p, ser->u.s.len};
  out->initial_repr = repr;
  const ezi_pk *schema = ezi_pk_attr(c, "settings_schema");
  if (!schema || (schema->type != EZI_PK_NONE && !is_instance(schema, "SettingsSchemaMetadata")))
    return fail(err, "bad settings_schema of", out->address);
  out->settings_schema = schema->type == EZI_PK_NONE ? NULL : schema;
  return 0;
}

int ezi_m39_meta_check(const ezi_pk *meta, size_t *n_components, ezi_pk_err *err) {
  if (n_components) *n_components = 0;
  if (!is_instance(meta, "GraphMetadata")) return fail(err, "not a", "GraphMetadata");
  int64_t v;
  const ezi_pk *root = ezi_pk_attr(meta, "root_name"), *comps = ezi_pk_attr(meta, "components");
  if (ezi_pk_int_of(ezi_pk_attr(meta, "schema_version"), &v))
    return fail(err, "a bad or missing", "schema_version");
  if (!root || (root->type != EZI_PK_NONE && !ezi_pk_cstr_of(root)))
    return fail(err, "a bad or missing", "root_name");
  if (!comps || comps->type != EZI_PK_DICT) return fail(err, "a bad or missing", "components");
  size_t n = ezi_pk_len(comps);
  for (size_t i = 0; i < n; i++) {
    ezi_m39_component c;
    int rc = ezi_m39_meta_component(meta, i, &c, err);
    if (rc) return rc;
    for (size_t j = 0; j < i; j++) /* keys are unique (components are few) */
      if (strcmp(ezi_pk_cstr_of(ezi_pk_key(comps, j)), c.address) == 0)
        return fail(err, "a duplicate component", c.address);
  }
  if (n_components) *n_components = n;
  return 0;
}

int ezi_m39_meta_find(const ezi_pk *meta, const char *address, ezi_m39_component *out,
                      ezi_pk_err *err) {
  const ezi_pk *comps = ezi_pk_attr(meta, "components");
  memset(out, 0, sizeof(*out));
  if (!is_instance(meta, "GraphMetadata") || !comps || comps->type != EZI_PK_DICT)
    return fail(err, "not a", "GraphMetadata");
  for (size_t i = ezi_pk_len(comps); i-- > 0;) {
    const char *k = ezi_pk_cstr_of(ezi_pk_key(comps, i));
    if (k && address && strcmp(k, address) == 0) return ezi_m39_meta_component(meta, i, out, err);
  }
  return EZ_ENOENT;
}

void ezi_m39_initial_settings(const ezi_m39_component *c, ezi_m39_settings_value *out) {
  out->serialized = c->initial_serialized;
  out->repr_value = c->initial_repr;
  out->structured_value =
      c->initial_repr && c->initial_repr->type == EZI_PK_DICT ? c->initial_repr : NULL;
  out->settings_schema = c->settings_schema;
}
