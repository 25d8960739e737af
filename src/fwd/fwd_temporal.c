/*
 * fwd_temporal.c - the temporal API's writes, distributed (5.6.11-5.6.16
 * with 4.3.6.2-4.3.6.4): each is the fwd_write of its operation (4.20's
 * temporal names) on the temporal collection, so a source registered for
 * an entity's attributes gets their instances, split by mode and attribute
 * exactly as a core write (an exclusive or redirect registration takes its
 * attributes out of the local write), sent through fwd_run (HTTP or
 * cor://), answered with the same 207/registrationId rules (api/dwrite.c).
 */
#include "fwd_int.h"

bool fwd_temporal_write(const fwd_in_t *in, const fwd_twrite_t *t, fwd_wout_t *out, problem_t *p)
{
    static const struct {
        reg_op_t    op;
        const char *method, *tail;
        bool        attr_body;
    } k[] = {
        [FWD_T_UPSERT]          = { REG_OP_UPSERT_TEMPORAL, "POST", NULL, false },
        [FWD_T_APPEND]          = { REG_OP_APPEND_ATTRS_TEMPORAL, "POST", "attrs", false },
        [FWD_T_DELETE_ATTR]     = { REG_OP_DELETE_ATTRS_TEMPORAL, "DELETE", "attrs", false },
        [FWD_T_MODIFY_INSTANCE] = { REG_OP_UPDATE_ATTR_INSTANCE_TEMPORAL, "PATCH", "attrs", true },
        [FWD_T_DELETE_INSTANCE] = { REG_OP_DELETE_ATTR_INSTANCE_TEMPORAL, "DELETE", "attrs", false },
        [FWD_T_DELETE]          = { REG_OP_DELETE_TEMPORAL, "DELETE", NULL, false },
    };
    fwd_write_t w = {
        .op            = k[t->kind].op,
        .method        = k[t->kind].method,
        .root          = "temporal/entities",
        .id            = t->id,
        .tail          = k[t->kind].tail,
        .tail_attr     = t->attr_path,
        .tail_instance = t->instance,
        .attr          = t->attr,
        .body          = t->body,
        .attr_body     = k[t->kind].attr_body,
        .types_of      = t->types_of,
        .types_ud      = t->types_ud,
    };
    return fwd_write(in, &w, out, p);
}
