/*
 * routes.c - the route table of the NGSI-LD API (Table 6.2-1, the parts
 * this broker implements) and of the admin resources.
 */
#include "api.h"

void api_entity_create(request_t *r);
void api_entity_get(request_t *r);
void api_entity_delete(request_t *r);
void api_entity_merge(request_t *r);
void api_entity_replace(request_t *r);
void api_entities_query(request_t *r);
void api_entities_purge(request_t *r);
void api_attrs_append(request_t *r);
void api_attrs_update(request_t *r);
void api_attr_patch(request_t *r);
void api_attr_replace(request_t *r);
void api_attr_delete(request_t *r);
void api_batch_create(request_t *r);
void api_batch_upsert(request_t *r);
void api_batch_update(request_t *r);
void api_batch_delete(request_t *r);
void api_batch_merge(request_t *r);
void api_batch_query(request_t *r);
void api_types_list(request_t *r);
void api_type_get(request_t *r);
void api_attributes_list(request_t *r);
void api_attribute_get(request_t *r);
void api_version(request_t *r);
void api_statistics(request_t *r);
void api_metrics(request_t *r);
void api_health(request_t *r);
void api_ready(request_t *r);
void api_admin_snapshot(request_t *r);
void api_admin_snapshot_get(request_t *r);
void api_ctx_list(request_t *r);
void api_ctx_create(request_t *r);
void api_ctx_get(request_t *r);
void api_ctx_delete(request_t *r);
void api_info_identity(request_t *r);
void api_sub_create(request_t *r);
void api_sub_query(request_t *r);
void api_sub_get(request_t *r);
void api_sub_update(request_t *r);
void api_sub_delete(request_t *r);
void api_temporal_create(request_t *r);
void api_temporal_query(request_t *r);
void api_temporal_get(request_t *r);
void api_temporal_delete(request_t *r);
void api_temporal_attrs_append(request_t *r);
void api_temporal_attr_delete(request_t *r);
void api_temporal_instance_patch(request_t *r);
void api_temporal_instance_delete(request_t *r);
void api_temporal_batch_query(request_t *r);
void api_temporal_entity_maps_query(request_t *r);
void api_temporal_entity_maps_post(request_t *r);
void api_csub_create(request_t *r);
void api_csub_query(request_t *r);
void api_csub_get(request_t *r);
void api_csub_update(request_t *r);
void api_csub_delete(request_t *r);
void api_reg_create(request_t *r);
void api_reg_query(request_t *r);
void api_reg_get(request_t *r);
void api_reg_update(request_t *r);
void api_reg_delete(request_t *r);
void api_dsub_notify(request_t *r);
void api_entity_maps_query(request_t *r);
void api_entity_maps_post(request_t *r);
void api_entity_map_get(request_t *r);
void api_entity_map_update(request_t *r);
void api_entity_map_delete(request_t *r);

#define V1 "/ngsi-ld/v1"

static const http_route_t routes[] = {
    /* pattern                                  GET                  POST               PUT               PATCH             DELETE */
    {V1 "/entities",                        api_entities_query,  api_entity_create, NULL,             NULL,             api_entities_purge, HR_GEOJSON_OK | HR_FORWARDS},
    {V1 "/entities/{id}",                   api_entity_get,      NULL,              api_entity_replace, api_entity_merge, api_entity_delete, HR_GEOJSON_OK | HR_FORWARDS},
    {V1 "/entities/{id}/attrs",             NULL,                api_attrs_append,  NULL,             api_attrs_update, NULL, HR_FORWARDS},
    {V1 "/entities/{id}/attrs/{attrId}",    NULL,                NULL,              api_attr_replace, api_attr_patch,   api_attr_delete, HR_FORWARDS},
    {V1 "/entityOperations/create",         NULL,                api_batch_create,  NULL,             NULL,             NULL, HR_FORWARDS},
    {V1 "/entityOperations/upsert",         NULL,                api_batch_upsert,  NULL,             NULL,             NULL, HR_FORWARDS},
    {V1 "/entityOperations/update",         NULL,                api_batch_update,  NULL,             NULL,             NULL, HR_FORWARDS},
    {V1 "/entityOperations/delete",         NULL,                api_batch_delete,  NULL,             NULL,             NULL, HR_FORWARDS},
    {V1 "/entityOperations/merge",          NULL,                api_batch_merge,   NULL,             NULL,             NULL, HR_FORWARDS},
    {V1 "/entityOperations/query",          NULL,                api_batch_query,   NULL,             NULL,             NULL, HR_GEOJSON_OK | HR_QUERY_POST | HR_FORWARDS},
    {V1 "/types",                           api_types_list,      NULL,              NULL,             NULL,             NULL, HR_FORWARDS},
    {V1 "/types/{type}",                    api_type_get,        NULL,              NULL,             NULL,             NULL, HR_FORWARDS},
    {V1 "/attributes",                      api_attributes_list, NULL,              NULL,             NULL,             NULL, HR_FORWARDS},
    {V1 "/attributes/{attrId}",             api_attribute_get,   NULL,              NULL,             NULL,             NULL, HR_FORWARDS},
    {V1 "/subscriptions",                   api_sub_query,       api_sub_create,    NULL,             NULL,             NULL,             0},
    {V1 "/subscriptions/{id}",              api_sub_get,         NULL,              NULL,             api_sub_update,   api_sub_delete,   0},
    {V1 "/temporal/entities",               api_temporal_query,  api_temporal_create, NULL,           NULL,             NULL, HR_FORWARDS},
    {V1 "/temporal/entities/{id}",          api_temporal_get,    NULL,              NULL,             NULL,             api_temporal_delete, HR_FORWARDS},
    {V1 "/temporal/entities/{id}/attrs",    NULL,                api_temporal_attrs_append, NULL,     NULL,             NULL, HR_FORWARDS},
    {V1 "/temporal/entities/{id}/attrs/{attrId}", NULL,          NULL,              NULL,             NULL,             api_temporal_attr_delete, HR_FORWARDS},
    {V1 "/temporal/entities/{id}/attrs/{attrId}/{instanceId}", NULL, NULL,          NULL,             api_temporal_instance_patch, api_temporal_instance_delete, HR_FORWARDS},
    {V1 "/temporal/entityOperations/query", NULL,                api_temporal_batch_query, NULL,      NULL,             NULL, HR_QUERY_POST | HR_FORWARDS},
    {V1 "/jsonldContexts",                  api_ctx_list,        api_ctx_create,    NULL,             NULL,             NULL,             0},
    {V1 "/jsonldContexts/{id}",             api_ctx_get,         NULL,              NULL,             NULL,             api_ctx_delete,   0},
    {V1 "/info/sourceIdentity",             api_info_identity,   NULL,              NULL,             NULL,             NULL,             0},
    {V1 "/csourceRegistrations",            api_reg_query,       api_reg_create,    NULL,             NULL,             NULL,             0},
    {V1 "/csourceRegistrations/{id}",       api_reg_get,         NULL,              NULL,             api_reg_update,   api_reg_delete,   0},
    {V1 "/entityMaps",                      api_entity_maps_query, api_entity_maps_post, NULL,         NULL,             NULL, HR_QUERY_POST | HR_FORWARDS},
    {V1 "/temporal/entityMaps",             api_temporal_entity_maps_query, api_temporal_entity_maps_post, NULL, NULL,    NULL, HR_QUERY_POST | HR_FORWARDS},
    {V1 "/entityMaps/{id}",                 api_entity_map_get,  NULL,              NULL,             api_entity_map_update, api_entity_map_delete, HR_FORWARDS},
    {V1 "/csourceSubscriptions",            api_csub_query,      api_csub_create,   NULL,             NULL,             NULL,             0},
    {V1 "/csourceSubscriptions/{id}",       api_csub_get,        NULL,              NULL,             api_csub_update,  api_csub_delete,  0},
    {"/version",                            api_version,         NULL,              NULL,             NULL,             NULL,             HR_NO_BODY_CHECKS},
    {"/statistics",                         api_statistics,      NULL,              NULL,             NULL,             NULL,             HR_NO_BODY_CHECKS},
    {"/metrics",                            api_metrics,         NULL,              NULL,             NULL,             NULL,             HR_NO_BODY_CHECKS},
    {"/health",                             api_health,          NULL,              NULL,             NULL,             NULL,             HR_NO_BODY_CHECKS | HR_PUBLIC},
    {"/ready",                              api_ready,           NULL,              NULL,             NULL,             NULL,             HR_NO_BODY_CHECKS | HR_PUBLIC},
    {"/dsub/{key}",                         NULL,                api_dsub_notify,   NULL,             NULL,             NULL,             HR_PUBLIC},
    {"/admin/snapshot",                     api_admin_snapshot_get, api_admin_snapshot, NULL,         NULL,             NULL,             HR_NO_BODY_CHECKS},
};

void api_init(store_t *store)
{
    api_store = store;
    http_set_after_handler(api_after_handler);     /* held answers (api_common.c) */
    http_set_offload(api_may_wait);                /* forwarded requests off the HTTP workers (api_common.c) */
}

const http_route_t *api_routes(size_t *n)
{
    *n = CR_ARRAY_LEN(routes);
    return routes;
}
