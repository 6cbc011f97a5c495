package main

import (
	"context"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The echo service, written out by hand (no generated code): Unary returns
// its request, Stream sends back every message it receives. Messages are
// protobuf's BytesValue.
const (
	serviceName  = "cmrt.rsocket.Echo"
	unaryMethod  = "/" + serviceName + "/Unary"
	streamMethod = "/" + serviceName + "/Stream"
)

// echoService is the service's handler type.
type echoService interface {
	Unary(ctx context.Context, in *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error)
	Stream(stream grpc.ServerStream) error
}

type echo struct{}

func (echo) Unary(_ context.Context, in *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
	return in, nil
}

func (echo) Stream(stream grpc.ServerStream) error {
	for {
		m := new(wrapperspb.BytesValue)
		if err := stream.RecvMsg(m); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if err := stream.SendMsg(m); err != nil {
			return err
		}
	}
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*echoService)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Unary", Handler: unaryHandler}},
	Streams: []grpc.StreamDesc{{StreamName: "Stream", ServerStreams: true, ClientStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error { return srv.(echoService).Stream(stream) }}},
}

func unaryHandler(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
	in := new(wrapperspb.BytesValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	call := func(ctx context.Context, req any) (any, error) {
		return srv.(echoService).Unary(ctx, req.(*wrapperspb.BytesValue))
	}
	if icpt == nil {
		return call(ctx, in)
	}
	return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: unaryMethod}, call)
}
