/*
 * codec.h - a compact binary form of an entity version, for corDB's log and
 * snapshots (src/store/cordb/log.c). A frozen entity holds pointers (and
 * interned names), so it cannot be written as it is: entity_encode writes
 * every field with varints and length-prefixed strings; entity_decode reads
 * it back into a draft (names interned) that entity_freeze turns into the
 * same version: same id, types, attributes in order, values, system times.
 *
 * Format (all integers LEB128 varints, signed ones zigzag; strings: length,
 * bytes; an optional string: 0 for none, else length + 1, bytes):
 *   entity: id, n_types, types..., createdAt, modifiedAt, scope (json or
 *           tag 0xff for none), n_attrs, attrs...
 *   attr:   name, datasetId?, kind, flags (1 value, 2 unitCode, 4 objectType,
 *           8 observedAt), [value json], [unitCode], [objectType],
 *           [observedAt], createdAt, modifiedAt, n_sub, sub attrs...
 *   json:   type byte, then NUMBER: 'i' zigzag varint | 'd' 8 bytes IEEE;
 *           STRING: string; ARRAY: n, children; OBJECT: n, (key, child)...
 * The decoder checks every length against the input and bounds the nesting
 * (CR_JSON_DEPTH_MAX); what it cannot read is refused (false), never guessed.
 */
#ifndef CORAINE_MODEL_CODEC_H
#define CORAINE_MODEL_CODEC_H

#include "model.h"

/* Appends e's encoding to sb (a malloc'ed or arena sbuf). */
void         entity_encode(sbuf_t *sb, const cr_entity_t *e);
/* A draft in arena a from buf[0..len), or NULL when the bytes are not one
 * well-formed encoding (exactly len bytes). */
cr_entity_t *entity_decode(arena_t *a, const void *buf, size_t len);

/* The varint and string primitives, shared with the log's record payloads. */
void cr_put_varint(sbuf_t *sb, uint64_t v);
void cr_put_str(sbuf_t *sb, const char *s, size_t n);

typedef struct cr_reader {
    const uint8_t *p, *end;
    bool           bad;         /* set on the first read past the end / malformed */
} cr_reader_t;

uint64_t    cr_get_varint(cr_reader_t *r);
/* A string of the input (not NUL-terminated): *n its length; NULL when bad. */
const char *cr_get_str(cr_reader_t *r, size_t *n);

#endif
