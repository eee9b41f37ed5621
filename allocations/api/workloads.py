"""Workloads and the right-sizing advisor over the API (issue 17).

GET  /allocations/{id}/manifests/?kind=vllm&image=...&model=...&args=...  ready-to-apply YAML for an active request
POST /allocations/{id}/attach/  {"manifest": "<yaml>", "containers": [...], "share": n}  the user's YAML, attached
GET  /advice/?model=llama-3.1-8b&precision=bf16&context_length=8192&sequences=4&mode=serve  the smallest slice per pool

All three compute and change nothing; bad input is a 400 with a message per field.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from allocations.advisor.estimate import MODES, PRECISIONS
from allocations.advisor.pools import advice_payload
from allocations.models import Allocation, NodePool
from allocations.workloads.attach import AttachError, attach_claims
from allocations.workloads.documents import DocumentError, dump_documents, load_documents
from allocations.workloads.from_allocation import claim_target
from allocations.workloads.manifests import KINDS, WorkloadInputError, build_manifests, parse_options
from tenants.api.schema import ErrorSerializer
from tenants.errors import InvalidInput


class ManifestQuerySerializer(serializers.Serializer[Any]):
    kind = serializers.ChoiceField(choices=KINDS)
    name = serializers.CharField(required=False, help_text="Object name (default per kind).")
    image = serializers.CharField(required=False, help_text="Container image (default per kind).")
    command = serializers.CharField(required=False, help_text="pod, job, deployment: the command, shell-quoted.")
    model = serializers.CharField(required=False, help_text="vllm: the model to serve.")
    args = serializers.CharField(required=False, help_text="vllm: more server arguments, shell-quoted.")
    share = serializers.IntegerField(required=False, help_text="Shared pools: only this share's workload.")


class ManifestsSerializer(serializers.Serializer[Any]):
    request = serializers.IntegerField()
    kind = serializers.CharField()
    namespace = serializers.CharField()
    claims = serializers.ListField(child=serializers.CharField())
    objects = serializers.ListField(child=serializers.DictField())
    yaml = serializers.CharField()


class AttachInputSerializer(serializers.Serializer[Any]):
    manifest = serializers.CharField(trim_whitespace=False, help_text="Your manifest, YAML, several documents allowed.")
    containers = serializers.ListField(
        child=serializers.CharField(max_length=253), required=False, max_length=100, help_text="Default: all."
    )
    share = serializers.IntegerField(required=False, allow_null=True, min_value=0)


class AttachedSerializer(serializers.Serializer[Any]):
    kind = serializers.CharField()
    name = serializers.CharField()
    containers = serializers.ListField(child=serializers.CharField())


class AttachOutputSerializer(serializers.Serializer[Any]):
    namespace = serializers.CharField()
    attached = AttachedSerializer(many=True)
    yaml = serializers.CharField()


class WorkloadViewSet(viewsets.GenericViewSet[Allocation]):
    """Manifests for an active request's claims, and claims attached to your own manifests."""

    serializer_class = ManifestsSerializer

    def get_queryset(self) -> Any:
        return Allocation.objects.for_user(self.request.user).select_related("tenant", "pool")

    @extend_schema(
        parameters=[ManifestQuerySerializer],
        responses={
            200: ManifestsSerializer,
            409: OpenApiResponse(ErrorSerializer, description="The request is not active: it has no claim to use."),
        },
    )
    @action(detail=True, methods=["get"])
    def manifests(self, request: Request, pk: str | None = None) -> Response:
        allocation = self.get_object()
        # The query's shape first, so malformed input is a 400 whatever the request's state. A plain dict: given a
        # QueryDict, DRF reads an empty optional field (?share=, ?name=) as left out, which the schema calls invalid.
        ManifestQuerySerializer(data=request.query_params.dict()).is_valid(raise_exception=True)
        target = claim_target(allocation)
        try:
            options = parse_options(dict(request.query_params.items()), target)
        except WorkloadInputError as exc:
            raise InvalidInput(exc.errors) from None
        objects = build_manifests(target, options)
        return Response(
            {
                "request": allocation.pk,
                "kind": options.kind,
                "namespace": target.namespace,
                "claims": list(target.claim_names),
                "objects": objects,
                "yaml": dump_documents(objects),
            }
        )

    @extend_schema(request=AttachInputSerializer, responses={200: AttachOutputSerializer})
    @action(detail=True, methods=["post"])
    def attach(self, request: Request, pk: str | None = None) -> Response:
        allocation = self.get_object()
        data = AttachInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        target = claim_target(allocation)
        try:
            documents = load_documents(v["manifest"])
            result, attached = attach_claims(
                documents, target, containers=tuple(v.get("containers") or ()), share=v.get("share")
            )
        except DocumentError as exc:
            raise InvalidInput({"manifest": [str(exc)]}) from None
        except AttachError as exc:
            raise InvalidInput({exc.field: [exc.message]}) from None
        return Response(
            {"namespace": target.namespace, "attached": [a.as_dict() for a in attached], "yaml": dump_documents(result)}
        )


class AdviceQuerySerializer(serializers.Serializer[Any]):
    model = serializers.CharField(required=False, help_text="A known model, e.g. llama-3.1-8b.")
    params_b = serializers.FloatField(required=False, help_text="Parameters in billions (for an unknown model).")
    precision = serializers.ChoiceField(choices=PRECISIONS, required=False)
    context_length = serializers.IntegerField(required=False, help_text="Tokens per sequence (default 4096).")
    sequences = serializers.IntegerField(required=False, help_text="Concurrent sequences or batch size (default 1).")
    mode = serializers.ChoiceField(choices=MODES, required=False)
    pool = serializers.IntegerField(required=False, help_text="Only this pool.")


class PoolAdviceSerializer(serializers.Serializer[Any]):
    pool = serializers.IntegerField()
    pool_name = serializers.CharField()
    gpu_model = serializers.CharField()
    kind = serializers.CharField()
    fits = serializers.BooleanField()
    profile = serializers.CharField(allow_null=True)
    share_memory_mib = serializers.IntegerField(allow_null=True)
    memory_gib = serializers.FloatField()
    cost = serializers.DictField(allow_null=True)
    units = serializers.DictField()
    fits_now = serializers.IntegerField()
    refused = serializers.ListField(child=serializers.DictField())


class AdviceSerializer(serializers.Serializer[Any]):
    model = serializers.CharField()
    known_model = serializers.BooleanField()
    estimate_gib = serializers.DictField()
    notes = serializers.ListField(child=serializers.CharField())
    pools = PoolAdviceSerializer(many=True)


class AdviceViewSet(viewsets.GenericViewSet[NodePool]):
    """Which slice do I need? The estimate and the smallest fitting profile or share of each pool."""

    serializer_class = AdviceSerializer
    queryset = NodePool.objects.none()

    @extend_schema(parameters=[AdviceQuerySerializer], responses={200: AdviceSerializer})
    def list(self, request: Request) -> Response:
        # The query's shape first (a plain dict: given a QueryDict, DRF reads an empty optional field such as ?pool=
        # as left out, and the advice answered for every pool); the advisor then checks what the shape cannot.
        query = request.query_params.dict()
        AdviceQuerySerializer(data=query).is_valid(raise_exception=True)
        return Response(advice_payload(query))
