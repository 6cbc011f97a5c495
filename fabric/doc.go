// Package fabric is the contract between cmrt's CM runtime (package id)
// and the fabrics that carry it, as database/sql/driver is between
// database/sql and its drivers: what a fabric implements (Fabric, an
// EventSource per event channel, an Endpoint per id, and for fabrics with
// a data path the verbs objects PD, MR, QP and CQ), the raw events it
// reports (RawEvent), the registry fabrics add themselves to (Register,
// Lookup, Names, Default), and the vocabulary both sides speak: port
// spaces, QP types, event types, connection and UD parameters, options,
// limits, work requests and completions, numbered as librdmacm and
// libibverbs number them.
//
// Programs use package id, which re-declares the names they type
// (id.PSTCP is fabric.PSTCP); they import fabric to pick a fabric by hand
// (id.WithFabric), to post work requests on a QP directly, or to write a
// fabric. Packages under fabric/ import this package, never id.
package fabric
