"""Multimodal tool results: images and text parts a tool may return instead of plain text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

__all__ = ["Content", "Image", "ImageContent", "TextContent", "content_from_json", "content_to_json"]

ImageDetail = Literal["low", "high", "auto"]


@dataclass(frozen=True)
class Image:
    """An image given by URL or by base64 data with its MIME type."""

    url: str | None = None
    base64_data: str | None = None
    mime_type: str | None = None

    def __post_init__(self) -> None:
        if (self.url is None) == (self.base64_data is None):
            raise ValueError("Image needs exactly one of url or base64_data")
        if self.base64_data is not None and not self.mime_type:
            raise ValueError("Image with base64_data needs a mime_type")

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.url is not None:
            data["url"] = self.url
        if self.base64_data is not None:
            data["base64_data"] = self.base64_data
        if self.mime_type is not None:
            data["mime_type"] = self.mime_type
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Image:
        return cls(url=data.get("url"), base64_data=data.get("base64_data"), mime_type=data.get("mime_type"))


@dataclass(frozen=True)
class TextContent:
    """A text part of a multimodal result or message."""

    text: str


@dataclass(frozen=True)
class ImageContent:
    """An image part of a multimodal result or message."""

    image: Image
    detail: ImageDetail = "auto"


Content: TypeAlias = TextContent | ImageContent


def content_to_json(content: Content) -> dict[str, Any]:
    """The JSON form of one content part, tagged by `type`."""
    if isinstance(content, TextContent):
        return {"type": "text", "text": content.text}
    return {"type": "image", "image": content.image.to_json(), "detail": content.detail}


def content_from_json(data: dict[str, Any]) -> Content:
    """Inverse of `content_to_json`."""
    kind = data.get("type")
    if kind == "text":
        return TextContent(str(data["text"]))
    if kind == "image":
        return ImageContent(Image.from_json(data["image"]), data.get("detail", "auto"))
    raise ValueError(f"Unknown content type: {kind!r}")
